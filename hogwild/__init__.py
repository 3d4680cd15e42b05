"""hogwild: lock-free Hogwild! training of PyTorch models on several CPU cores or GPUs.

The engine's steps (validate -> share -> spawn -> supervise -> result) are listed in engine.py.

Usage: `result = hogwild.train(model, loss_fn, batches, hogwild.Config(workers=2, lr=0.1, epochs=2))`

The models, the data pipeline and the task jobs are `hogwild.models`, `hogwild.data` and `hogwild.tasks`.
"""
from pathlib import Path as _Path

from ._checkout import install_if_checkout as _install_if_checkout

_install_if_checkout(_Path(__file__).resolve().parent)

from .config import Config, ConfigError
from .engine import TrainResult, train
from .parent.agent import CommunicationAgent, SharedTrainingState
from .parent.evaluation import EvaluationFailed
from .parent.supervisor import WorkerFailed
from .share.checkpoint import CheckpointMismatch

__all__ = ["Config", "ConfigError", "train", "TrainResult", "WorkerFailed", "EvaluationFailed", "CheckpointMismatch",
           "CommunicationAgent", "SharedTrainingState"]
