"""Hung workers: a worker whose counters stop moving (stopped with SIGSTOP, deadlocked in a collective, stuck in I/O)
is alive, so the supervisor's exit checks never see it; this watch does.

Every tick the parent's loop hands the watch the counters' snapshot. A worker makes progress when anything in its row
changes (a ticket taken, an update applied or skipped, a gradient contributed). Its step time is the median of its
recent steps, measured as (seconds between two observed changes) / (steps between them). A worker still running is
hung when it has made no progress for

    max(Config.hang_timeout, HANG_STEPS x its median step)

seconds of the parent's watching (the parent's own pauses - a Ctrl-Z that stops the whole process group, a slow
checkpoint write - count at most MAX_GAP per check, so they never make healthy workers look hung). Before a worker's
first observed step the bound is hang_timeout alone. Start-up is bounded elsewhere (parent_loop.wait_until_ready),
and so are evaluations (they run in the parent, beside this loop).

Serves step 4 of `hogwild.train` (supervise).

Usage: `watch = ProgressWatch(workers, hang_timeout)`; every tick `hung = watch.observe(ints, floats, alive)` ->
[(worker, description)]; when stopping, `watch.describe_late(worker)` says whether a worker that ignored the stop was
hung.
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from ..share.run_state import CounterSnapshot

HANG_STEPS = 20  # a worker is hung after this many of its median steps without progress (at least hang_timeout)
MAX_GAP = 1.0  # seconds of one check that count towards a stall at most (the parent itself may have been paused)
STEP_SAMPLES = 31  # recent step-time samples per worker whose median is its step time


class ProgressWatch:
    """Per-worker seconds without progress and median step time, from successive counter snapshots."""

    def __init__(self, workers: int, hang_timeout: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.hang_timeout, self.clock = hang_timeout, clock
        self.rows: list[np.ndarray | None] = [None] * workers  # the last row seen of each worker
        self.steps = [0.0] * workers  # steps done when the row last changed
        self.changed = [0.0] * workers  # clock reading when the row last changed
        self.stalled = [0.0] * workers  # seconds watched without a change
        self.samples: list[deque[float]] = [deque(maxlen=STEP_SAMPLES) for _ in range(workers)]
        self.last_check: float | None = None

    def median_step(self, worker: int) -> float | None:
        """Seconds per step of this worker (median of its recent steps), None before its first observed step."""
        return statistics.median(self.samples[worker]) if self.samples[worker] else None

    def bound(self, worker: int) -> float | None:
        """Seconds without progress after which this worker is hung (None: the watch is off)."""
        if self.hang_timeout is None:
            return None
        step = self.median_step(worker)
        return max(self.hang_timeout, HANG_STEPS * step) if step is not None else self.hang_timeout

    def observe(self, snapshot: CounterSnapshot, alive: Sequence[bool]) -> list[tuple[int, str]]:
        """Record a snapshot of the counters; returns the workers still running that are now hung, each
        with a description naming how long it made no progress and the bound."""
        now = self.clock()
        watched = 0.0 if self.last_check is None else min(now - self.last_check, MAX_GAP)
        self.last_check = now
        hung = []
        for worker, running in enumerate(alive):
            row = snapshot.worker_state(worker)  # any progress changes it
            steps = snapshot.steps(worker)
            if self.rows[worker] is None or not np.array_equal(row, self.rows[worker]):
                done = steps - self.steps[worker]
                if self.rows[worker] is not None and done > 0:
                    self.samples[worker].append((now - self.changed[worker]) / done)
                self.rows[worker], self.steps[worker], self.changed[worker] = row, steps, now
                self.stalled[worker] = 0.0
                continue
            if not running:  # starting, or waiting for a ticket: that time is no hang
                self.stalled[worker] = 0.0
                continue
            self.stalled[worker] += watched
            bound = self.bound(worker)
            if bound is not None and self.stalled[worker] >= bound:
                hung.append((worker, self.describe(worker)))
        # The one whose progress stopped first comes first: in sync mode the others then wait for it in a collective.
        return sorted(hung, key=lambda item: self.changed[item[0]])

    def describe(self, worker: int) -> str:
        step = self.median_step(worker)
        pace = f"{HANG_STEPS} x its median step of {step:.3g} s" if step is not None else "before its first step"
        return (f"made no progress for {self.stalled[worker]:.0f} s (the bound: hang_timeout {self.hang_timeout:g} s "
                f"or {pace}, whichever is longer): hung (stopped, deadlocked or stuck in I/O)")

    def describe_late(self, worker: int, waited: float) -> str | None:
        """A worker that did not finish its step within `waited` seconds of the stop request: a description when it
        had been without progress for HANG_STEPS of its median steps by then (it was hung, not merely slow), else
        None. The hang_timeout floor does not apply: the stop request has already been waited on."""
        step = self.median_step(worker)
        stalled = self.stalled[worker] + waited
        if self.hang_timeout is None or step is None or stalled < HANG_STEPS * step:
            return None
        return (f"made no progress for {stalled:.0f} s ({HANG_STEPS} x its median step of {step:.3g} s) and did not "
                f"finish its step within {waited:g} s of the stop request: hung (stopped, deadlocked or stuck in I/O)")
