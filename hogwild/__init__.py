"""hogwild: lock-free Hogwild! training of PyTorch models on several CPU cores or GPUs.

The engine's steps (validate -> share -> spawn -> supervise -> result) are listed in engine.py.

Usage: `result = hogwild.train(model, loss_fn, batches, hogwild.Config(workers=2, lr=0.1, epochs=2))`

The models, the data pipeline and the task jobs are `hogwild.models`, `hogwild.data` and `hogwild.tasks`.
"""
import multiprocessing as _multiprocessing
from pathlib import Path as _Path

from ._checkout import install_if_checkout as _install_if_checkout
from ._lifeline import die_while_starting as _die_while_starting

_die_while_starting(_multiprocessing.current_process().name)  # first, in a worker: torch takes seconds to import
_install_if_checkout(_Path(__file__).resolve().parent)

from .config import Config, ConfigError
from .engine import TrainResult, train
from .parent.agent import CommunicationAgent, SharedTrainingState
from .parent.evaluation import EvaluationFailed
from .parent.supervisor import WorkerFailed
from .share.checkpoint import CheckpointMismatch

__all__ = ["Config", "ConfigError", "train", "TrainResult", "WorkerFailed", "EvaluationFailed", "CheckpointMismatch",
           "CommunicationAgent", "SharedTrainingState"]
