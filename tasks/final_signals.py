"""SIGINT and SIGTERM after training, while run.py evaluates the best checkpoint on the held-out set (NMT: beam
decoding of the whole set, minutes on a large one) and writes summary.json: the evaluation stops, the summary is
written saying what was skipped, run.lock is released and run.py exits 130, as for a signal during training.
Without this a SIGTERM there (Python's default action) kills the process before any of that.

Usage: `with FinalSignals() as signals: heldout = signals.run(lambda: job.finish(best, run_dir)); ...write the
summary...`; then `signals.skipped` is e.g. "signal SIGTERM" when the evaluation was cut short (heldout None).
"""
from __future__ import annotations

import signal
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stopped(BaseException):
    """Raised in the main thread by the first signal while an evaluation runs (a BaseException, so that no
    `except Exception` in the evaluation code takes it for an error of its own)."""


class FinalSignals:
    """Inside the block, SIGINT and SIGTERM are handled: the first one stops `run(...)` if one is running and is
    recorded (`skipped`, `received`); later ones are ignored until the block ends and the previous handlers return.
    Handlers can only be set from the main thread: elsewhere (a library caller's thread) nothing changes."""

    def __init__(self) -> None:
        self.received: str | None = None  # 'signal SIGTERM': the first signal that arrived in the block
        self.skipped: str | None = None  # the same, when it stopped an evaluation
        self._running = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "FinalSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._handle) for number in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame) -> None:
        if self.received is None:
            self.received = f"signal {signal.Signals(number).name}"
            if self._running:
                raise _Stopped

    def run(self, evaluation: Callable[[], T]) -> T | None:
        """evaluation(), or None when a signal stopped it (or had arrived before it began)."""
        if self.received is not None:
            self.skipped = self.received
            return None
        self._running = True
        try:
            return evaluation()
        except _Stopped:
            self.skipped = self.received
            return None
        finally:
            self._running = False
