"""Checkpoints: atomic write-then-rename files holding everything needed to resume at the exact step.

A checkpoint holds the model's parameters and buffers, the shared optimizer state, the worker counters (global
step, staleness, losses), the data position (epoch and next batch, or every worker's shard position), the RNG
states of the parent and the config. Loading into a model of a different shape is refused naming the tensor.

A missing, truncated or foreign file is refused naming it (CheckpointError), as is resuming with other data.

Usage: `save_checkpoint(path, state)`; `state = load_checkpoint(path, model)`
"""
from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
from torch import nn

from .files import write_atomic

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or cannot be used here; the message names the file."""


class CheckpointMismatch(CheckpointError):
    """The checkpoint was written for a model of another shape (or other data)."""


def model_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def rng_states() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """Write `state` to a temporary file in the same directory, fsync it, then rename it over `path`:
    a reader (or a crash) sees the old checkpoint or the new one, never half of one. A failed write (full disk)
    raises hogwild.files.WriteFailed naming `path`, and the previous checkpoint stays as it was."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda file: torch.save({"format": FORMAT, **state}, file))


def build_checkpoint(model_state: dict[str, torch.Tensor], optimizer_state: dict, counters: dict[str, np.ndarray],
                     data_position: dict[str, Any], config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The checkpoint dictionary (tensors are private copies, safe to save while workers train)."""
    return {
        "model": {name: tensor.detach().clone() for name, tensor in model_state.items()},
        "shapes": {name: tuple(tensor.shape) for name, tensor in model_state.items()},
        "optimizer": optimizer_state,
        "counters": {name: torch.from_numpy(np.array(value)) for name, value in counters.items()},
        "global_step": int(counters["ints"][:, 0].sum()),
        "data_position": data_position,
        "rng": rng_states(),
        "config": config,
        **extra,
    }


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint dictionary at `path`; a missing, truncated or foreign file raises CheckpointError naming it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001 - torch's reader errors do not say which file
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: cannot read the checkpoint (truncated or not a checkpoint: {detail})") \
            from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a hogwild checkpoint (format {FORMAT})")
    return state


def load_checkpoint(path: str, model: nn.Module) -> dict[str, Any]:
    """Read a checkpoint and check it fits `model`; raises CheckpointMismatch naming the first differing tensor."""
    state = read_checkpoint(path)
    check_fits(state, path, model)
    return state


def check_fits(state: dict[str, Any], path: str, model: nn.Module) -> None:
    """Raise CheckpointMismatch naming the first tensor whose name or shape differs between checkpoint and model."""
    expected, found = model_shapes(model), state["shapes"]
    for name in list(expected) + [name for name in found if name not in expected]:  # model order
        if name not in found:
            raise CheckpointMismatch(f"{path} was written for a different model: it has no tensor {name!r}")
        if name not in expected:
            raise CheckpointMismatch(f"{path} was written for a different model: this model has no tensor {name!r}")
        if tuple(found[name]) != expected[name]:
            raise CheckpointMismatch(
                f"{path} was written for a different model: {name!r} has shape {tuple(found[name])} in the "
                f"checkpoint but {expected[name]} in this model")


def check_resumable(state: dict[str, Any], path: str, n_batches: int, data_assignment: str, workers: int) -> None:
    """Refuse to resume from a checkpoint written for other data (batch count) or, in partition mode, another
    worker count - before anything is written or started."""
    position = state["data_position"]
    if position["n_batches"] != n_batches:
        raise CheckpointMismatch(f"cannot resume {path}: it was trained on {position['n_batches']} batches, now "
                                 f"there are {n_batches} (same data, batch size and seed are needed)")
    if data_assignment == "partition" and len(position.get("workers", [])) != workers:
        raise CheckpointMismatch(f"cannot resume {path} in partition mode with {workers} workers: it was written "
                                 f"with {len(position.get('workers', []))} shards")


def restore_model(model: nn.Module, state: dict[str, Any]) -> None:
    """Copy the checkpoint's tensors into the model's existing (possibly shared) tensors."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(state["model"][name])
