"""Checkpoints and the run directory: the file format (atomic write-then-rename files holding everything needed to
resume at the exact step), and the run directory of one `hogwild.train` call (config.json, resume from its last.pt,
writing last.pt / best.pt with the data position).

Serves step 1 of `hogwild.train` (validate: a resumed last.pt is read and checked before anything is written), step 2
(share: it is loaded into the shared model, optimizer and counters) and steps 4-5 (supervise, result: last.pt and
best.pt are written).

A checkpoint holds the model's parameters (frozen ones included; a tied one stored once) and buffers (any dtype),
the shared optimizer state (of the trained parameters only), the worker counters (global step, staleness, losses),
the data position (epoch and next batch, or every worker's shard position), the RNG states of the parent and the
config. Loading into a model of a different shape is refused naming the tensor.
A missing, truncated or foreign file is refused naming it (CheckpointError), as is resuming with other data.
Every tensor is written as a CPU tensor. Checkpoints are read with `torch.load(weights_only=True)`: tensors, plain containers and numbers, plus the numpy
array of the RNG state (`SAFE_GLOBALS`); a file that needs any other Python object unpickled (a crafted file whose
loading would run code) is refused, naming it, without running anything.

Usage: `save_checkpoint(path, state)`; `state = load_checkpoint(path, model)`; any .pt of ours:
`state = load_file(path)`. In engine.py:
`saved = load_resume_state(config, model, n_batches)` (checked before anything is written);
`run_dir = prepare_run_dir(config)`; `start = resume(saved, model, optimizer, counters, config)`;
`RunCheckpoints(...).write(path)`.
"""
from __future__ import annotations

import os
import pickle
import random
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..config import Config
from ..files import update_sections, write_atomic
from ..shared_optim import private_copy
from .run_state import CounterSnapshot, SharedCounters

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


def safe_globals() -> list[Any]:
    """What our checkpoints need unpickled beyond tensors and plain containers: numpy's RNG state is an ndarray."""
    multiarray = getattr(np, "_core", None) or np.core  # numpy 2 moved numpy.core to numpy._core
    return [multiarray.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_file(path: str) -> Any:
    """torch.load(path) restricted to what our checkpoints hold (weights_only plus safe_globals()), on the CPU.
    Raises CheckpointError naming the file when it cannot be read, or needs other objects unpickled (refused before
    any of them is created: a crafted pickle runs nothing)."""
    try:
        with torch.serialization.safe_globals(safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch names the blocked global ("Unsupported global: GLOBAL io.open", "unsupported GLOBAL posix.system
        # whose module posix is blocked") after its advice to load with weights_only=False, which is not ours to give
        unsafe = re.search(r"GLOBAL ([\w.]+)", str(error))
        lines = [line.strip() for line in str(error).splitlines()
                 if line.strip() and not line.startswith(("Weights only load failed", "Check the documentation"))]
        what = f"it needs {unsafe.group(1)} unpickled" if unsafe else lines[0] if lines else \
            "it needs objects other than tensors unpickled"
        raise CheckpointError(f"{path}: not a hogwild checkpoint ({what}; refused: loading it could run code)") \
            from None
    except Exception as error:  # noqa: BLE001 - torch's reader errors do not say which file
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: cannot read the checkpoint (truncated or not a checkpoint: {detail})") \
            from None


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """Write `state` to a temporary file in the same directory, fsync it, then rename it over `path`:
    a reader (or a crash) sees the old checkpoint or the new one, never half of one. A failed write (full disk)
    raises hogwild.files.WriteFailed naming `path`, and the previous checkpoint stays as it was."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = {"format": FORMAT, **on_cpu(state)}
    write_atomic(path, lambda file: torch.save(state, file))


def on_cpu(value: Any) -> Any:
    """`value` with every tensor in it (in dicts, lists and tuples) on the CPU: a checkpoint written from a GPU
    snapshot (the evaluator's best) must load with a plain torch.load on a machine without that GPU."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, dict):
        return {key: on_cpu(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(on_cpu(item) for item in value)
    return value


def build_checkpoint(model_state: dict[str, torch.Tensor], optimizer_state: dict, counters: CounterSnapshot,
                     data_position: dict[str, Any], config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The checkpoint dictionary (tensors are private copies, safe to save while workers train)."""
    return {
        "model": private_copy(model_state),  # a tied weight once: it loads back tied
        "shapes": {name: tuple(tensor.shape) for name, tensor in model_state.items()},
        "optimizer": optimizer_state,
        "counters": {name: torch.from_numpy(np.array(value)) for name, value in counters.arrays().items()},
        "global_step": counters.updates(),
        "data_position": data_position,
        "rng": rng_states(),
        "config": config,
        **extra,
    }


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint dictionary at `path`; a missing, truncated or foreign file raises CheckpointError naming it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    state = load_file(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a hogwild checkpoint (no 'format': {FORMAT} entry)")
    if "model" in state and not isinstance(state["model"], dict):
        raise CheckpointError(f"{path}: not a hogwild checkpoint (its 'model' entry is not a state_dict)")
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
        stream = "a stream of batches (an iterable that cannot be indexed)"  # 0 batches: hogwild/share/stream.py
        trained = stream if position["n_batches"] == 0 else f"{position['n_batches']} batches"
        now = f"it is {stream}" if n_batches == 0 else f"there are {n_batches}"
        raise CheckpointMismatch(f"cannot resume {path}: it was trained on {trained}, now {now} (same data, batch "
                                 f"size and seed are needed)")
    if data_assignment == "partition" and len(position.get("workers", [])) != workers:
        raise CheckpointMismatch(f"cannot resume {path} in partition mode with {workers} workers: it was written "
                                 f"with {len(position.get('workers', []))} shards")


def restore_model(model: nn.Module, state: dict[str, Any]) -> None:
    """Copy the checkpoint's tensors into the model's existing (possibly shared) tensors."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(state["model"][name])


LAST, BEST = "last.pt", "best.pt"


def prepare_run_dir(config: Config) -> str | None:
    """Create config.checkpoint_dir and write its config.json sections "config" and "command" (the engine's; other
    sections, e.g. run.py's `run`, are kept: each section has one writer). None when the run has no directory. A fresh
    run (not config.resume) in a directory that holds a run's last.pt is warned about: it replaces that run."""
    if config.checkpoint_dir is None:
        return None
    if not config.resume and os.path.exists(os.path.join(config.checkpoint_dir, LAST)):
        warnings.warn(f"{config.checkpoint_dir} holds a run's {LAST}: this fresh run replaces its last.pt and best.pt "
                      f"and appends to its metrics.jsonl (Config(resume=True) continues that run instead)",
                      stacklevel=3)
    os.makedirs(config.checkpoint_dir, exist_ok=True)
    update_sections(os.path.join(config.checkpoint_dir, "config.json"), config=config.to_dict(), command=sys.argv)
    return config.checkpoint_dir


def load_resume_state(config: Config, model: nn.Module, n_batches: int) -> dict[str, Any] | None:
    """The saved last.pt when config.resume and it exists, checked against the model's shapes and the data (the
    batch count; in partition mode the worker count) before anything is written. Else None."""
    path = os.path.join(config.checkpoint_dir, LAST) if config.checkpoint_dir else None
    if not (config.resume and path and os.path.exists(path)):
        return None
    saved = load_checkpoint(path, model)
    check_resumable(saved, path, n_batches, config.data_assignment, config.workers)
    return saved


@dataclass(frozen=True)
class StartPosition:
    """Where the data feed starts: the global ticket (queue and sync modes) and every shard's (epoch, position)."""

    seq: int
    partitions: list[tuple[int, int]]


def resume(saved: dict[str, Any] | None, model: nn.Module, optimizer, counters: SharedCounters,
           config: Config) -> StartPosition:
    """Load a saved run (from load_resume_state, which checked it) into the shared model, optimizer and counters
    (and the parent's RNGs); the data position to start from. Without `saved`, a fresh start."""
    workers = config.workers
    if saved is None:
        return StartPosition(0, [(0, 0)] * workers)
    position = saved["data_position"]
    partitions = [(0, 0)] * workers
    if config.data_assignment == "partition":
        partitions = [tuple(p) for p in position["workers"]]
    restore_model(model, saved)
    optimizer.load_state_dict(saved["optimizer"])
    restore_counters(counters, saved["counters"])
    restore_rng_states(saved["rng"])
    return StartPosition(position["seq"], partitions)


def restore_counters(counters: SharedCounters, saved: dict[str, torch.Tensor]) -> None:
    """Same worker count: row by row. Otherwise the totals go to worker 0 (rates and losses stay right)."""
    ints, floats, staleness = saved["ints"], saved["floats"], saved["staleness"]
    if ints.shape[0] != counters.workers:
        ints = torch.cat([ints.sum(0, keepdim=True), torch.zeros_like(ints[:1]).repeat(counters.workers - 1, 1)])
        floats = torch.cat([floats.sum(0, keepdim=True), torch.zeros_like(floats[:1]).repeat(counters.workers - 1, 1)])
        staleness = torch.cat([staleness.sum(0, keepdim=True),
                               torch.zeros_like(staleness[:1]).repeat(counters.workers - 1, 1)])
    counters.load(ints, floats, staleness)


class RunCheckpoints:
    """Writes last.pt and best.pt of a run: the shared model and optimizer, the counters, the data position and the
    evaluator's state (`evaluator_state` is read when a checkpoint is written, so it may be set later)."""

    def __init__(self, run_dir: str | None, model: nn.Module, optimizer, counters: SharedCounters, config: Config,
                 n_batches: int, start: StartPosition, resumed_evaluator: dict[str, Any] | None = None) -> None:
        self.run_dir, self.model, self.optimizer, self.counters = run_dir, model, optimizer, counters
        self.config, self.n_batches, self.start = config, n_batches, start
        self.resumed_evaluator = resumed_evaluator  # the evaluator's state saved in the resumed last.pt
        self.last = os.path.join(run_dir, LAST) if run_dir else None
        self.evaluator_state: Callable[[], dict[str, Any]] | None = None
        self.queue_position: Callable[[], int] | None = None  # queue mode: the feed's first ticket not done

    def write(self, path: str, model_state: dict[str, torch.Tensor] | None = None, **extra: Any) -> None:
        snapshot = self.counters.snapshot()
        seq = self.queue_position() if self.queue_position is not None else snapshot.resume_seq(self.start.seq)
        position = {"n_batches": self.n_batches, "seq": seq, "workers": snapshot.partition_positions()}
        if self.config.data_assignment == "partition":
            position["seq"] = 0
        if self.evaluator_state is not None and "evaluator" not in extra:
            extra["evaluator"] = self.evaluator_state()
        save_checkpoint(path, build_checkpoint(model_state or self.model.state_dict(), self.optimizer.state_dict(),
                                               snapshot, position, self.config.to_dict(), **extra))

    def write_last(self) -> None:
        if self.last:
            self.write(self.last)

    def save_best(self, model_state: dict[str, torch.Tensor], best: dict[str, float], updates: int) -> None:
        if self.run_dir:
            self.write(os.path.join(self.run_dir, BEST), model_state, metrics=best, best_step=updates,
                       evaluator=None)

    def best_path(self) -> str | None:
        path = os.path.join(self.run_dir, BEST) if self.run_dir else None
        return path if path and os.path.exists(path) else None
