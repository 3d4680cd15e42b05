"""Checkpoints: atomic write-then-rename files holding everything needed to resume at the exact step.

A checkpoint holds the model's parameters and buffers, the shared optimizer state, the worker counters (global
step, staleness, losses), the data position (epoch and next batch, or every worker's shard position), the RNG
states of the parent and the config. Loading into a model of a different shape is refused naming the tensor.

Usage: `save_checkpoint(path, state)`; `state = load_checkpoint(path, model)`
"""
from __future__ import annotations

import os
import random
import tempfile
from typing import Any

import numpy as np
import torch
from torch import nn

FORMAT = 1


class CheckpointMismatch(ValueError):
    """The checkpoint was written for a model of another shape."""


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
    a reader (or a crash) sees the old checkpoint or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save({"format": FORMAT, **state}, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    dir_handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_handle)  # the rename itself survives a power loss
    finally:
        os.close(dir_handle)


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


def load_checkpoint(path: str, model: nn.Module) -> dict[str, Any]:
    """Read a checkpoint and check it fits `model`; raises CheckpointMismatch naming the first differing tensor."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a hogwild checkpoint (format {FORMAT})")
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
    return state


def restore_model(model: nn.Module, state: dict[str, Any]) -> None:
    """Copy the checkpoint's tensors into the model's existing (possibly shared) tensors."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(state["model"][name])
