"""SIGINT, SIGTERM and SIGHUP (a closed terminal) after training, while run.py evaluates the best checkpoint on the
held-out set (NMT: beam decoding of the whole set, minutes on a large one) and writes summary.json: the evaluation
stops, the summary is written saying what was skipped, run.lock is released and run.py exits 130, as for a signal
during training. Without this a SIGTERM or SIGHUP there (Python's default action) kills the process before any of
that.

Before the engine starts (loading the data, building the model), `stops_as_interrupt` makes SIGTERM and SIGHUP end
run.py as Ctrl-C does there (KeyboardInterrupt: run.lock released, "interrupted", exit 130).

A signal that comes as training ends (the engine stopping its workers, evaluating, writing last.pt) is the engine's
to handle; it hands it on (`TrainResult.late_signal`), and FinalSignals takes it as the first signal: the final
evaluation is skipped as if the signal had come during it.

Usage: `with stops_as_interrupt(): run_training(...)`; `with FinalSignals(result.late_signal) as signals: heldout =
signals.run(lambda: job.finish(best, run_dir)); ...write the summary...`; then `signals.skipped` is e.g. "signal
SIGTERM" when the evaluation was cut short or skipped (heldout None).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable, TypeVar

from hogwild.process_signals import PARENT_SIGNALS, detach_terminal, give_back, take_over

T = TypeVar("T")
SIGNALS = PARENT_SIGNALS  # SIGINT, SIGTERM, SIGHUP: those that stop a run while it trains


@contextmanager
def stops_as_interrupt() -> Iterator[None]:
    """Inside the block (main thread only), SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does by default;
    the engine's graceful stop and FinalSignals replace this handler while they run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number: int, frame) -> None:
        if number == signal.SIGHUP:
            detach_terminal()
        raise KeyboardInterrupt

    previous = take_over((signal.SIGTERM, signal.SIGHUP), interrupt)
    try:
        yield
    finally:
        give_back(previous)


class _Stopped(BaseException):
    """Raised in the main thread by the first signal while an evaluation runs (a BaseException, so that no
    `except Exception` in the evaluation code takes it for an error of its own)."""


class FinalSignals:
    """Inside the block, SIGINT, SIGTERM and SIGHUP are handled (SIGHUP detaches the hung-up terminal first): the
    first one stops `run(...)` if one is running and is recorded (`skipped`, `received`); later ones are ignored until
    the block ends and the previous handlers return.
    Handlers can only be set from the main thread: elsewhere (a library caller's thread) nothing changes."""

    def __init__(self, received: str | None = None) -> None:
        """received: a signal that came before the block, once training had ended (hogwild.TrainResult.late_signal:
        while the engine stopped its workers and wrote last.pt); it counts as the first, and skips the evaluation."""
        self.received: str | None = received  # 'signal SIGTERM': the first signal, in the block or given
        self.skipped: str | None = None  # the same, when it stopped an evaluation
        self._running = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "FinalSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = take_over(SIGNALS, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        give_back(self._previous)

    def _handle(self, number: int, frame) -> None:
        if number == signal.SIGHUP:
            detach_terminal()
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
