"""When the parent evaluates, within a share of the wall time, and without holding up the parent's loop.

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

Usage (parent_loop.py): `periodic = PeriodicEvaluation(evaluator, config, updates)`; every tick
`done = periodic.poll()` -> (updates, metrics) or None, then `periodic.maybe_start(updates)`; at the end
`done = periodic.finish()` waits for a running evaluation.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .config import Config
from .evaluator import EvaluationFailed, Evaluator


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
