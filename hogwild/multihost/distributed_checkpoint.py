"""Checkpoints of a multi-host job, under Config.checkpoint_dir:

    distributed/server<i>.pt   each parameter server's partition of the central model (written by that server)
    distributed/model.pt       the final model (written by the first training host at the end of the job)
    host<i>/                   each training host's own engine run directory (last.pt: parameters, optimizer
                               state, step, data position, RNG; written after the final synchronisation, so it
                               holds the job's final model)

Resume (Config.resume=True) restores every rank: servers their partitions, hosts their engine state.
Files are written atomically (hogwild.share.checkpoint.save_checkpoint: write, fsync, rename).

Usage: `store = DistributedCheckpoint(run_dir, "easgd", numel, servers=2); store.save_partition(0, center, updates)`
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from ..share.checkpoint import CheckpointError, load_file, save_checkpoint
from .math import partition_bounds


class DistributedCheckpoint:
    """Reads and writes the distributed state of one job; every method is a no-op without a checkpoint_dir."""

    def __init__(self, checkpoint_dir: str | None, algorithm: str, numel: int, servers: int) -> None:
        self.checkpoint_dir, self.algorithm, self.numel = checkpoint_dir, algorithm, numel
        self.bounds = partition_bounds(numel, max(servers, 1))

    def _path(self, name: str) -> str:
        return os.path.join(self.checkpoint_dir, "distributed", name)

    def save_partition(self, index: int, center: np.ndarray, updates: int) -> None:
        """Server `index` writes its partition of the central model.  # center: (hi - lo,)"""
        if self.checkpoint_dir is None:
            return
        save_checkpoint(self.partition_path(index), {
            "algorithm": self.algorithm, "numel": self.numel, "bounds": self.bounds[index],
            "center": torch.from_numpy(center.copy()), "updates": updates})

    def partition_path(self, index: int) -> str | None:
        return None if self.checkpoint_dir is None else self._path(f"server{index}.pt")

    def has_partition(self, index: int) -> bool:
        path = self.partition_path(index)
        return path is not None and os.path.exists(path)

    def load_partition(self, index: int) -> np.ndarray:
        """The saved partition of server `index`; refuses a file written for another model or server layout."""
        path = self._path(f"server{index}.pt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"resume: {path} does not exist (was the previous job run with the same "
                                    f"checkpoint_dir, algorithm and number of servers?)")
        state = load_file(path)  # tensors and plain values only: a crafted file is refused, running nothing
        if not isinstance(state, dict) or not isinstance(state.get("center"), torch.Tensor):
            raise CheckpointError(f"{path}: not a hogwild parameter-server checkpoint (no 'center' entry)")
        if state.get("numel") != self.numel or tuple(state.get("bounds", ())) != tuple(self.bounds[index]):
            raise ValueError(f"resume: {path} holds partition {state.get('bounds')} of a {state.get('numel')}-"
                             f"parameter model, but this job needs partition {self.bounds[index]} of {self.numel} "
                             f"parameters (different model or number of servers)")
        return state["center"].numpy().astype(np.float32)

    def save_model(self, model: nn.Module) -> None:
        """The first training host writes the job's final model (after the final synchronisation)."""
        if self.checkpoint_dir is None:
            return
        save_checkpoint(self._path("model.pt"), {
            "algorithm": self.algorithm, "numel": self.numel,
            "model": {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}})
