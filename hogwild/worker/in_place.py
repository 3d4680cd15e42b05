"""A 'cpu' worker's step: forward and backward on the shared parameters themselves (Hogwild's original form), so
there is nothing to pull or copy out; the gradients stay on the shared parameters' process-private .grad, where the
shared optimizer reads them. The same face as a device worker's step (device_step.py), so that one loop drives both
(worker.py): a pull that only records the version the step reads, and a result the updater resolves.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage: `step = InPlaceStep(model, loss_fn, config)`; per step `step.pull.prefetch(version)`,
`step.pull.make_current()`, `result = step.run(batch, slot, clock)`; the updater `result.resolve()`.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import Config
from ..share.run_state import PhaseClock
from ..shared_optim import trainable_parameters
from .gradients import GradientCheck, forward_backward, gradient_stats, scale_gradients


class VersionPull:
    """The pull of a step that reads the shared parameters in place: it copies nothing and only records the global
    update count when the step was about to read them."""

    def __init__(self):
        self.pending: int | None = None
        self.version: int | None = None
        self.event = None  # nothing in flight

    def prefetch(self, version: int | None, batch: Any = None) -> None:
        if version is not None:
            self.pending = version

    def make_current(self) -> int:
        if self.pending is not None:
            self.version, self.pending = self.pending, None
        return self.version

    def finish(self) -> None:
        pass


@dataclass
class InPlaceResult:
    """A finished in-place step: its gradients already on the shared parameters' .grad (clipped)."""

    finite: bool
    loss: float
    clock: PhaseClock
    count: int
    eager: bool = False

    def resolve(self) -> tuple[bool, float, None, list[float]]:
        return self.finite, self.loss, None, self.clock.seconds()


class InPlaceStep:
    """Forward and backward on the shared model; the finiteness (hooks summing each gradient as backward makes it)
    and the clipping read the gradients where they are."""

    def __init__(self, model: nn.Module, loss_fn: Callable, config: Config):
        self.model, self.loss_fn, self.device = model, loss_fn, torch.device("cpu")
        self.shared, self.shared_buffers = trainable_parameters(model), list(model.buffers())
        self.clip_norm = config.clip_norm
        # Without clipping, finiteness is checked by hooks during backward; clipping computes the norm anyway.
        self.check = GradientCheck(self.shared) if config.skip_nonfinite and config.clip_norm is None else None
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16) if config.amp == "bf16" else nullcontext()
        self.clocks = [PhaseClock(self.device), PhaseClock(self.device)]
        self.pull = VersionPull()

    def prepare(self, batches: list) -> int:
        return 0  # no graphs: a 'cpu' worker's step is never captured

    def warm_up(self, batch: Any) -> None:
        """One forward and backward on `batch`, no update (Config.compile); the gradients dropped."""
        forward_backward(self.loss_fn, self.model, batch, self.autocast)
        self.check.total() if self.check is not None else None
        for param in self.shared:
            param.grad = None

    def run(self, batch: Any, slot: int, clock: PhaseClock) -> InPlaceResult:
        for param in self.shared:
            param.grad = None  # the previous step's, applied or skipped
        loss, count = forward_backward(self.loss_fn, self.model, batch, self.autocast)
        clock.mark()
        usable, scale, loss_value = gradient_stats(self.shared, self.check, self.clip_norm, loss)
        if usable and scale is not None:
            scale_gradients([param.grad for param in self.shared], scale)
        clock.mark()
        return InPlaceResult(usable, loss_value, clock, count)
