"""Checkpoints of a multi-host job, under Config.checkpoint_dir:

    distributed/server<i>.pt   each parameter server's partition of the central model (written by that server)
    distributed/model.pt       the final model (written by the first training host at the end of the job)
    host<i>/                   each training host's own engine run directory (last.pt: optimizer state, step,
                               data position, RNG); at the end its model is replaced by the job's final model

Resume (Config.resume=True) restores every rank: servers their partitions, hosts their engine state.
Files are written atomically (hogwild.checkpoint.save_checkpoint: write, fsync, rename).

Usage: `store = DistributedCheckpoint(run_dir, "easgd", numel, servers=2); store.save_partition(0, center, updates)`
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from hogwild.checkpoint import load_checkpoint, restore_model, save_checkpoint
from hogwild.multihost_math import partition_bounds


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
        save_checkpoint(self._path(f"server{index}.pt"), {
            "algorithm": self.algorithm, "numel": self.numel, "bounds": self.bounds[index],
            "center": torch.from_numpy(center.copy()), "updates": updates})

    def load_partition(self, index: int) -> np.ndarray:
        """The saved partition of server `index`; refuses a file written for another model or server layout."""
        path = self._path(f"server{index}.pt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"resume: {path} does not exist (was the previous job run with the same "
                                    f"checkpoint_dir, algorithm and number of servers?)")
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("numel") != self.numel or tuple(state.get("bounds", ())) != tuple(self.bounds[index]):
            raise ValueError(f"resume: {path} holds partition {state.get('bounds')} of a {state.get('numel')}-"
                             f"parameter model, but this job needs partition {self.bounds[index]} of {self.numel} "
                             f"parameters (different model or number of servers)")
        return state["center"].numpy().astype(np.float32)

    def finish_host(self, model: nn.Module, host_dir: str, write_model: bool) -> None:
        """After the final synchronisation: put the final model into this host's last.pt (so that a resumed job
        starts from it, with this host's optimizer state and data position), and on the first host write model.pt."""
        if self.checkpoint_dir is None:
            return
        last = os.path.join(host_dir, "last.pt")
        if os.path.exists(last):
            state = load_checkpoint(last, model)
            state.pop("format", None)
            state["model"] = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
            save_checkpoint(last, state)
        if write_model:
            save_checkpoint(self._path("model.pt"), {
                "algorithm": self.algorithm, "numel": self.numel,
                "model": {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}})

    @staticmethod
    def restore_host(model: nn.Module, host_dir: str | None) -> bool:
        """Load this host's last.pt parameters into `model` (before the agent starts); False when there is none."""
        last = None if host_dir is None else os.path.join(host_dir, "last.pt")
        if last is None or not os.path.exists(last):
            return False
        restore_model(model, load_checkpoint(last, model))
        return True
