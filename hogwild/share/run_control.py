"""The run's two shared control flags, and the only code that reads or writes them: stop and start.

Step 2 of `hogwild.train` (share) creates one `RunControl`; every process holds it. The parent requests a stop (the
first reason wins, kept in the parent) and marks the start of training once every worker is ready; workers wait for
that start and check `stopping` before each step; the feed thread and communication agents check `stopping` too.

Usage: parent `control = RunControl()`, `control.request_stop("time_limit")`, `control.mark_started(time.time())`;
worker `deadline = control.wait_for_start(stopped, config.time_limit)`, `if control.stopping: ...`
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

_STOP = 0  # != 0: finish the current step and exit
_START = 1  # 0 until every worker is ready, then the parent's start time in milliseconds


class RunControl:
    """A (2,) int64 tensor in shared memory, [stop flag, start time in ms], behind named methods. Picklable:
    spawned workers get the shared tensor's handle (the stop reason stays in the parent)."""

    def __init__(self) -> None:
        self._set_flags(torch.zeros(2, dtype=torch.int64).share_memory_())
        self.stop_reason: str | None = None  # the first reason given to request_stop (parent side)

    def _set_flags(self, flags: torch.Tensor) -> None:
        self._flags = flags
        self._view = flags.numpy()  # a numpy view of the shared storage: reads cost ~100 ns, not a torch indexing

    def __getstate__(self) -> dict[str, Any]:
        return {"flags": self._flags}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._set_flags(state["flags"])
        self.stop_reason = None

    def request_stop(self, reason: str | None = None) -> None:
        """Tell every worker to finish its step and exit; the first reason given is kept (`stop_reason`)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._view[_STOP] = 1

    @property
    def stopping(self) -> bool:
        """A stop has been requested (by the parent, a signal, an agent or the supervisor)."""
        return bool(self._view[_STOP])

    def mark_started(self, when: float) -> None:
        """Every worker is ready: training starts at `when` (time.time()), which workers read for their deadline."""
        self._view[_START] = int(when * 1000)

    @property
    def started(self) -> bool:
        return bool(self._view[_START])

    def wait_for_start(self, stopped: Callable[[], bool], time_limit: float | None) -> float | None:
        """Block until the parent says go (every worker is ready); returns the deadline (time.time()) or None."""
        flags = self._view
        while not flags[_START] and not stopped():
            time.sleep(0.002)
        return flags[_START] / 1000 + time_limit if time_limit else None
