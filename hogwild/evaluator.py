"""Evaluation while workers train: copy the shared parameters into a private model, evaluate that snapshot,
keep the best checkpoint by a chosen metric, and decide early stopping.

The copy is one memcpy per tensor, so workers keep training during it and during the evaluation; the snapshot
does not change under the evaluation (the live parameters would).

Usage: `ev = Evaluator(model, evaluate, config, on_best); metrics = ev(updates); if ev.should_stop: ...`
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .config import Config
from .replica import torch_device


class Evaluator:
    """Runs `evaluate(model) -> dict[str, float]` on snapshots; tracks the best value of `config.best_metric`."""

    def __init__(self, model: nn.Module, evaluate: Callable[[nn.Module], dict[str, float]], config: Config,
                 on_best: Callable[[dict[str, torch.Tensor], dict[str, float], int], None] | None = None):
        self.shared = model
        self.evaluate, self.on_best = evaluate, on_best
        self.metric, self.mode, self.patience = config.best_metric, config.best_mode, config.patience
        self.target = config.target
        self.private = copy.deepcopy(model).to(torch_device(config.eval_device))  # private storage
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

    def __call__(self, updates: int, final: bool = False) -> dict[str, float]:
        state = self.snapshot()
        self.private.eval()
        with torch.no_grad():
            metrics = self.evaluate(self.private)
        self.private.train()
        if not isinstance(metrics, dict) or not metrics:
            raise TypeError(f"evaluate(model) must return a non-empty dict of metrics, got {metrics!r}")
        metrics = {str(key): float(value) for key, value in metrics.items()}
        if self.metric is None:
            self.metric = next(iter(metrics))
        if self.metric not in metrics:
            raise KeyError(f"Config.best_metric {self.metric!r} is not among the metrics evaluate returned: "
                           f"{sorted(metrics)}")
        self.history.append({"updates": updates, "final": final, **metrics})
        value = metrics[self.metric]
        if self._improves(value):
            self.best_value, self.best_metrics, self.best_step = value, metrics, updates
            self.evaluations_without_improvement = 0
            if self.on_best is not None:
                self.on_best(state, metrics, updates)
        else:
            self.evaluations_without_improvement += 1
        return metrics

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
    def reached_target(self) -> bool:
        """The best value has reached Config.target (time-to-accuracy runs stop there)."""
        if self.target is None or self.best_value is None:
            return False
        return self.best_value >= self.target if self.mode == "max" else self.best_value <= self.target

    @property
    def should_stop(self) -> bool:
        """Early stopping: `patience` evaluations in a row without improving the best value, or the target reached."""
        return self.reached_target or (self.patience is not None
                                       and self.evaluations_without_improvement >= self.patience)
