"""Evaluation while workers train: what is evaluated (Evaluator) and when (PeriodicEvaluation, EvalBudget).

Serves step 4 of `hogwild.train` (supervise; the final evaluation in step 5, result). Only the parent evaluates.

Evaluator: copy the shared parameters into a private model, evaluate that snapshot, keep the best checkpoint by a
chosen metric, and decide early stopping. The copy is one memcpy per tensor, so workers keep training during it and
during the evaluation; the snapshot does not change under the evaluation (the live parameters would). The three steps
are separate so that PeriodicEvaluation can take the snapshot in the parent's loop, run `evaluate` on a thread and
record the result back in the loop: `snapshot()`, `run(final)`, `record(updates, metrics, final)`; `ev(updates)`
does all three.

The evaluate contract: `evaluate(model) -> dict[str, float]`, or `evaluate(model, final: bool)`. A function that
takes `final` is told which evaluation this is: False for the periodic checks during training (it may score a
fixed subsample of the held-out set), True for the final evaluation of the run (typically the whole set). Its
final evaluation then scores other data than the periodic ones, so it is reported but does not compete for best.pt
(unless no periodic evaluation ran); without a `final` parameter every evaluation, the final one included, competes.

EvalBudget: periodic evaluations may take at most `share` of the wall time since training started. With `spent`
seconds of evaluation so far and the latest one taking `last` seconds, the next one starts no earlier than

    started + (spent + last) / share - last

that is, when evaluation time will still be within the share at its end if it takes as long as the latest one. A slow
evaluation (a large model, a long held-out set, a busy machine) thus spaces the evaluations out by itself.

PeriodicEvaluation: the parent's loop calls `poll()` and `maybe_start(updates)` every tick. An evaluation is due
`eval_every` updates after the previous one started or `eval_every_seconds` after it ended (and at once with
`eval_at_start`: the engine starts that one before the workers do); it starts when it is due,
the budget allows and no other one runs. The snapshot is copied in the loop (so it belongs to the update count it is
labelled with); evaluate() then runs on a thread, and its result is recorded back in the loop (history, best.pt,
patience). torch releases the GIL in its kernels, so the loop keeps logging, checkpointing, stopping on time and
noticing failures while evaluate runs. A thread rather than a process: evaluate() is often a closure (defined under
`if __name__ == "__main__"`, as in the README), which a spawned process could not unpickle.

Usage: `ev = Evaluator(model, evaluate, config, on_best); metrics = ev(updates); if ev.should_stop: ...`;
in the parent's loop `periodic = PeriodicEvaluation(ev, config, updates)`; every tick `done = periodic.poll()` ->
(updates, metrics) or None, then `periodic.maybe_start(updates)`; at the end `done = periodic.finish()` waits for a
running evaluation, or `periodic.abandon()` stops it when the run failed.
"""
from __future__ import annotations

import copy
import ctypes
import inspect
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..config import Config


ABANDON_SECONDS = 60.0  # an abandoned evaluation stops at its next Python line: this bounds one torch call


class EvaluationAbandoned(BaseException):
    """Raised inside an evaluation the run no longer waits for (PeriodicEvaluation.abandon); a BaseException, so that
    an evaluate() that catches Exception does not swallow it."""


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
        self.target = config.target
        self.device = torch.device(config.evaluation_device())
        self.final_device = torch.device(config.evaluation_device(after_training=True))  # the workers have exited
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
        """Snapshot, evaluate and record, in this thread. The final evaluation (called once the workers have exited)
        runs on Config.evaluation_device(after_training=True), which may be a GPU a worker used."""
        if final and self.final_device != self.device:
            self.device = self.final_device
            self.private.to(self.device)
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


class EvalBudget:
    """The earliest start of the next periodic evaluation, from the measured durations of the previous ones."""

    def __init__(self, share: float | None, started: float):
        self.share = share or None  # None or 0: no cap
        self.started = started  # clock reading when training started
        self.spent = 0.0  # seconds of periodic evaluation so far
        self.last: float | None = None  # seconds the latest one took

    def add(self, seconds: float) -> None:
        self.spent += seconds
        self.last = seconds

    def earliest_start(self) -> float:
        if self.share is None or self.last is None:
            return self.started
        return self.started + (self.spent + self.last) / self.share - self.last

    def allows(self, now: float) -> bool:
        return now >= self.earliest_start()


class PeriodicEvaluation:
    """Periodic evaluations of the shared model on a background thread, one at a time, within the budget."""

    def __init__(self, evaluator: Evaluator, config: Config, updates: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.evaluator, self.clock = evaluator, clock
        self.every, self.every_seconds = config.eval_every, config.eval_every_seconds
        now = clock()
        self.budget = EvalBudget(config.eval_budget, now)
        self.next_updates = updates if config.eval_at_start else updates + self.every if self.every else None
        self.next_time = now + self.every_seconds if self.every_seconds else None
        self.thread: threading.Thread | None = None
        self.updates: int | None = None  # update count of the snapshot being evaluated
        self.outcome: tuple[dict[str, float] | None, BaseException | None] = (None, None)
        self.seconds = 0.0  # how long the latest evaluate() took

    def due(self, updates: int, now: float) -> bool:
        if self.thread is not None:
            return False
        scheduled = ((self.next_updates is not None and updates >= self.next_updates)
                     or (self.next_time is not None and now >= self.next_time))
        return scheduled and self.budget.allows(now)

    def maybe_start(self, updates: int) -> bool:
        """Start an evaluation of the current parameters if one is due; returns whether it started."""
        if not self.due(updates, self.clock()):
            return False
        self.evaluator.snapshot()
        self.updates = updates
        self.next_updates = updates + self.every if self.every else None
        self.thread = threading.Thread(target=self._work, name="hogwild-evaluate", daemon=True)
        self.thread.start()
        return True

    def _work(self) -> None:
        started = self.clock()
        try:
            self.outcome = (self.evaluator.run(final=False), None)
        except BaseException as error:  # noqa: BLE001 - handed to the parent's loop, which stops the run
            self.outcome = (None, error)
        self.seconds = self.clock() - started

    def poll(self) -> tuple[int, dict[str, float]] | None:
        """(updates, metrics) of an evaluation that has finished since the last call, recorded; else None.
        Raises EvaluationFailed when evaluate raised or its metrics cannot be recorded."""
        if self.thread is None or self.thread.is_alive():
            return None
        return self._collect()

    def abandon(self, timeout: float = ABANDON_SECONDS) -> None:
        """Stop an evaluation whose result no one will read (the run failed): an exception is raised in its thread,
        which takes it at evaluate's next Python line (torch's kernels run to their end), and it is waited for, at
        most `timeout` seconds. A process that exits while that thread is inside torch aborts ("terminate called
        without an active exception", exit 134) instead of exiting with its own status."""
        if self.thread is None:
            return
        if self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident),
                                                       ctypes.py_object(EvaluationAbandoned))
        self.thread.join(timeout)
        self.thread, self.outcome = None, (None, None)

    def finish(self) -> tuple[int, dict[str, float]] | None:
        """Wait for a running evaluation (bounded by evaluate itself) and record it; None when none runs."""
        return None if self.thread is None else self._collect()

    def _collect(self) -> tuple[int, dict[str, float]]:
        self.thread.join()
        self.thread = None
        metrics, error = self.outcome
        self.outcome = (None, None)
        self.budget.add(self.seconds)
        self.next_time = self.clock() + self.every_seconds if self.every_seconds else None
        if error is None:
            try:
                return self.updates, self.evaluator.record(self.updates, metrics)
            except (KeyError, TypeError, ValueError) as record_error:
                error = record_error
        raise EvaluationFailed(f"evaluate() failed in the periodic evaluation at update {self.updates}: "
                               f"{type(error).__name__}: {error}") from error
