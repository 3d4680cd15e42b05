"""The run directory of one `hogwild.train` call: its set-up (config.json), resuming from its last.pt, and writing
last.pt / best.pt with the data position.

Usage (engine.py): `saved = load_resume_state(config, model, n_batches)` (checked before anything is written);
`run_dir = prepare_run_dir(config)`; `start = resume(saved, model, optimizer, counters, config)`;
`RunCheckpoints(...).write(path)`.
The checkpoint file format itself lives in checkpoint.py.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from .checkpoint import (build_checkpoint, check_resumable, load_checkpoint, restore_model, restore_rng_states,
                         save_checkpoint)
from .config import Config
from .counters import READY, SharedCounters
from .feed import partition_positions, resume_seq
from .files import update_sections

LAST, BEST = "last.pt", "best.pt"


def prepare_run_dir(config: Config) -> str | None:
    """Create config.checkpoint_dir and write its config.json sections "config" and "command" (the engine's; other
    sections, e.g. run.py's `run`, are kept: each section has one writer). None when the run has no directory."""
    if config.checkpoint_dir is None:
        return None
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
    counters.ints[:, READY] = 0


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

    def write(self, path: str, model_state: dict[str, torch.Tensor] | None = None, **extra: Any) -> None:
        snapshot = self.counters.snapshot()
        position = {"n_batches": self.n_batches, "seq": resume_seq(snapshot["ints"], self.start.seq),
                    "workers": partition_positions(snapshot["ints"])}
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
