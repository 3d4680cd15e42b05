"""Process supervision: spawn, detect failures within seconds, stop cleanly, survive signals, leave no orphans.

- A worker that raises sends its traceback through the error queue and exits 1; one killed by a signal is named
  by that signal. Either way the parent stops the others, writes a checkpoint and raises `WorkerFailed`.
- A worker that hangs (alive, no progress: progress_watch.py) is named the same way (`declare_hung`, which kills it);
  so is one that ignores a stop request for join_timeout when it had been without progress for many of its steps.
- SIGINT/SIGTERM in the parent request a graceful stop (finish the step, checkpoint, return). Workers ignore both
  (PARENT_SIGNALS): Ctrl-C, `timeout` and batch schedulers signal the whole process group, and the parent decides.
- Workers die with the parent (prctl PR_SET_PDEATHSIG on Linux, plus a parent-pid check in their loop), also while
  they are still starting: `import hogwild` sets it first thing in the engine's workers (hogwild/_lifeline.py),
  before torch is imported (seconds, during which a killed parent's workers used to live on).

Serves steps 3 and 4 of `hogwild.train` (spawn, supervise).

Usage: `sup = Supervisor(processes, errors); sup.start(); failure = sup.wait(0.1); sup.stop(control, timeout=10)`
(control: the run's RunControl)
"""
from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait as wait_for_sentinels
from typing import TYPE_CHECKING, Any

from .._lifeline import PARENT_PID_VARIABLE

if TYPE_CHECKING:  # this module imports no torch (nor does hogwild/_lifeline.py, which `import hogwild` runs first)
    from ..share.run_state import RunControl

PARENT_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # handled by the parent only; workers ignore them


class WorkerFailed(RuntimeError):
    """A worker raised or was killed; the message names it and shows its traceback or signal."""

    def __init__(self, message: str, worker: int, checkpoint: str | None = None):
        super().__init__(message)
        self.worker, self.checkpoint = worker, checkpoint


def describe_signal(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Supervisor:
    """Watches the worker processes; the parent's loop calls wait() between its own duties."""

    def __init__(self, processes: list[Any], errors: Any, names: list[str]):
        self.processes, self.errors, self.names = processes, errors, names
        self.tracebacks: dict[int, str] = {}
        self.failed_worker = -1  # the first worker found failed; -1 while none (or when an agent failed)
        self._failure: str | None = None
        self._stopped: set[int] = set()  # workers stop() had to terminate or kill: their exit is not a failure
        # Set by the parent's loop: why a worker that ignored the stop request for `waited` seconds was hung (None:
        # merely slow), from its progress (progress_watch.ProgressWatch.describe_late).
        self.describe_late: Callable[[int, float], str | None] | None = None

    def start(self) -> None:
        os.environ[PARENT_PID_VARIABLE] = str(os.getpid())  # a worker's `import hogwild` reads it (die_while_starting)
        for process in self.processes:
            process.start()

    def wait(self, timeout: float) -> str | None:
        """Sleep up to `timeout` or until a worker exits; return a failure description or None."""
        alive = [p.sentinel for p in self.processes if p.exitcode is None]
        if alive:
            wait_for_sentinels(alive, timeout)
        return self.failure()

    def all_exited(self) -> bool:
        return all(p.exitcode is not None for p in self.processes)

    def failure(self) -> str | None:
        """Describes the first worker found failed (the same one on every later call), or None."""
        if self.failed_worker >= 0:
            return self._failure
        for worker, process in enumerate(self.processes):
            code = process.exitcode
            if code is None or code == 0:
                continue
            if worker in self._stopped:  # terminated by stop(): a failure only if it had reported an error first
                self._drain_errors(timeout=0.0)
                if worker not in self.tracebacks:
                    continue
            self._failure, self.failed_worker = self.describe(worker, code), worker
            return self._failure
        return None

    def name(self, worker: int) -> str:
        return f"worker {worker} ({self.names[worker]}, pid {self.processes[worker].pid})"

    def declare_hung(self, worker: int, description: str) -> str:
        """Record a live worker that makes no progress as the run's failure (unless one was found first) and kill
        it now (SIGKILL also ends a stopped process), so stopping the others does not wait for it."""
        if self.failed_worker < 0:
            self._failure, self.failed_worker = f"{self.name(worker)} {description}; killed", worker
        self._stopped.add(worker)
        self.processes[worker].kill()
        return self._failure

    def describe(self, worker: int, code: int) -> str:
        name = self.name(worker)
        if code < 0 and worker not in self.tracebacks:
            return f"{name} was killed by signal {describe_signal(-code)}"
        self._drain_errors(timeout=2.0 if worker not in self.tracebacks else 0.0)
        if worker in self.tracebacks:
            return f"{name} raised an exception:\n{self.tracebacks[worker]}"
        return f"{name} exited with status {code} before reporting an error (its stderr above says why)"

    def _drain_errors(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                worker, text = self.errors.get(timeout=max(0.0, deadline - time.monotonic()))
                self.tracebacks[worker] = text
            except (queue.Empty, OSError, EOFError, ValueError):
                return

    def stop(self, control: RunControl, timeout: float) -> None:
        """Set the stop flag, let workers finish their step, then terminate and kill any that hang."""
        control.request_stop()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for worker, process in enumerate(self.processes):
            late = self.describe_late(worker, timeout) if process.exitcode is None and self.describe_late else None
            if late is not None and self.failed_worker < 0:
                self._failure, self.failed_worker = f"{self.name(worker)} {late}; killed", worker
        # All at once: 100 hung workers take 2 s, not 200. Workers ignore SIGTERM once started (PARENT_SIGNALS), so
        # terminate only stops one still starting up; kill ends the rest.
        for signal_them in ("terminate", "kill"):
            late = [process for process in self.processes if process.exitcode is None]
            self._stopped.update(worker for worker, process in enumerate(self.processes) if process in late)
            for process in late:
                getattr(process, signal_them)()
            deadline = time.monotonic() + 2.0
            for process in late:
                process.join(max(0.0, deadline - time.monotonic()))


@contextmanager
def graceful_signals(on_signal: Callable[[str], None]) -> Iterator[None]:
    """While active, SIGINT and SIGTERM call on_signal(name) instead of killing the parent (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(number: int, frame: Any) -> None:
        on_signal(describe_signal(number))

    for number in (signal.SIGINT, signal.SIGTERM):
        previous[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
