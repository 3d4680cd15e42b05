"""hogwild: lock-free Hogwild! training of PyTorch models on several CPU cores or GPUs.

Usage: `result = hogwild.train(model, loss_fn, batches, hogwild.Config(workers=2, lr=0.1, epochs=2))`
"""
from .agent import CommunicationAgent, SharedTrainingState
from .checkpoint import CheckpointMismatch
from .config import Config
from .engine import TrainResult, train
from .supervisor import WorkerFailed

__all__ = ["Config", "train", "TrainResult", "WorkerFailed", "CheckpointMismatch", "CommunicationAgent",
           "SharedTrainingState"]
