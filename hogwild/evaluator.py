"""Evaluation while workers train: copy the shared parameters into a private model, evaluate that snapshot,
keep the best checkpoint by a chosen metric, and decide early stopping.

The copy is one memcpy per tensor, so workers keep training during it and during the evaluation; the snapshot
does not change under the evaluation (the live parameters would). The three steps are separate so that
eval_schedule.py can take the snapshot in the parent's loop, run `evaluate` on a thread and record the result back
in the loop: `snapshot()`, `run(final)`, `record(updates, metrics, final)`; `ev(updates)` does all three.

The evaluate contract: `evaluate(model) -> dict[str, float]`, or `evaluate(model, final: bool)`. A function that
takes `final` is told which evaluation this is: False for the periodic checks during training (it may score a
fixed subsample of the held-out set), True for the final evaluation of the run (typically the whole set). Its
final evaluation then scores other data than the periodic ones, so it is reported but does not compete for best.pt
(unless no periodic evaluation ran); without a `final` parameter every evaluation, the final one included, competes.

Usage: `ev = Evaluator(model, evaluate, config, on_best); metrics = ev(updates); if ev.should_stop: ...`
"""
from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .config import Config


class EvaluationFailed(RuntimeError):
    """evaluate() raised (or returned something unusable); the run was checkpointed first.
    `checkpoint`: last.pt (None without a run directory); the original exception is `__cause__`."""

    def __init__(self, message: str, checkpoint: str | None = None):
        super().__init__(message)
        self.checkpoint = checkpoint


def takes_final(evaluate: Callable) -> bool:
    """Whether evaluate accepts the keyword `final` (a parameter of that name, or **kwargs)."""
    try:
        parameters = inspect.signature(evaluate).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any((p.name == "final" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
               or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class Evaluator:
    """Runs `evaluate(model[, final]) -> dict[str, float]` on snapshots; tracks the best value of
    `config.best_metric`."""

    def __init__(self, model: nn.Module, evaluate: Callable[..., dict[str, float]], config: Config,
                 on_best: Callable[[dict[str, torch.Tensor], dict[str, float], int], None] | None = None):
        self.shared = model
        self.evaluate, self.on_best = evaluate, on_best
        self.takes_final = takes_final(evaluate)
        self.metric, self.mode, self.patience = config.best_metric, config.best_mode, config.patience
        self.device = torch.device(config.evaluation_device())
        self.private = copy.deepcopy(model).to(self.device)  # private storage
        self.best_value: float | None = None
        self.best_metrics: dict[str, float] | None = None
        self.best_step: int | None = None
        self.evaluations_without_improvement = 0
        self.history: list[dict[str, Any]] = []

    @torch.no_grad()
    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copy the shared parameters and buffers into the private model; returns its state_dict."""
        private = self.private.state_dict()
        for name, tensor in self.shared.state_dict().items():
            private[name].copy_(tensor)
        return private

    def run(self, final: bool = False) -> dict[str, float]:
        """evaluate() on the private model (thread-safe with respect to training: it reads the snapshot only)."""
        self.private.eval()
        try:
            with torch.no_grad():  # grad mode is per thread: set it here, on the evaluating thread
                metrics = self.evaluate(self.private, final=final) if self.takes_final else self.evaluate(self.private)
        finally:
            self.private.train()
        if not isinstance(metrics, dict) or not metrics:
            raise TypeError(f"evaluate(model) must return a non-empty dict of metrics, got {metrics!r}")
        return {str(key): float(value) for key, value in metrics.items()}

    def record(self, updates: int, metrics: dict[str, float], final: bool = False) -> dict[str, float]:
        """Add an evaluation of the current snapshot to the history, the best-so-far and the patience count."""
        if self.metric is None:
            self.metric = next(iter(metrics))
        if self.metric not in metrics:
            raise KeyError(f"Config.best_metric {self.metric!r} is not among the metrics evaluate returned: "
                           f"{sorted(metrics)}")
        self.history.append({"updates": updates, "final": final, **metrics})
        if final and self.takes_final and any(not h["final"] for h in self.history):
            return metrics  # scored on other data than the periodic evaluations: reported, not compared
        value = metrics[self.metric]
        if self._improves(value):
            self.best_value, self.best_metrics, self.best_step = value, metrics, updates
            self.evaluations_without_improvement = 0
            if self.on_best is not None:
                self.on_best(self.private.state_dict(), metrics, updates)
        else:
            self.evaluations_without_improvement += 1
        return metrics

    def __call__(self, updates: int, final: bool = False) -> dict[str, float]:
        """Snapshot, evaluate and record, in this thread."""
        self.snapshot()
        return self.record(updates, self.run(final), final)

    def state_dict(self) -> dict[str, Any]:
        """Best-so-far and patience bookkeeping, for checkpoints (a resumed run keeps beating the same best)."""
        return {"metric": self.metric, "best_value": self.best_value, "best_metrics": self.best_metrics,
                "best_step": self.best_step, "without_improvement": self.evaluations_without_improvement,
                "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("metric") not in (None, self.metric) and self.metric is not None:
            return  # a different best_metric now: start its bookkeeping afresh
        self.metric = self.metric or state.get("metric")
        self.best_value, self.best_metrics = state["best_value"], state["best_metrics"]
        self.best_step, self.evaluations_without_improvement = state["best_step"], state["without_improvement"]
        self.history = list(state["history"])

    def _improves(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best_value is None:
            return True
        return value > self.best_value if self.mode == "max" else value < self.best_value

    @property
    def should_stop(self) -> bool:
        """Early stopping: `patience` evaluations in a row without improving the best value."""
        return self.patience is not None and self.evaluations_without_improvement >= self.patience
