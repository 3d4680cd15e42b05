"""Process supervision: spawn, detect failures within seconds, stop cleanly, leave no orphans.

- A worker that raises writes its traceback to a file and exits 1; one killed by a signal is named by that signal.
  Either way the parent replaces it while Config.max_restarts allows (`replace`; the parent's loop decides), else
  stops the others, writes a checkpoint and raises `WorkerFailed`.
- A worker that hangs (alive, no progress: progress_watch.py) is named the same way (`declare_hung`, which kills it);
  so is one that ignores a stop request for join_timeout when it had been without progress for many of its steps.
- Signals to the process group stop the run gracefully in the parent and are ignored by the workers: the rules are
  hogwild/process_signals.py's, which the workers and run.py take too.
- Workers die with the parent (prctl PR_SET_PDEATHSIG on Linux, plus a parent-pid check in their loop), also while
  they are still starting: `import hogwild` sets it first thing in the engine's workers (hogwild/_lifeline.py),
  before torch is imported (seconds, during which a killed parent's workers used to live on).

Serves steps 3 and 4 of `hogwild.train` (spawn, supervise).

Usage: `sup = Supervisor(processes, error_dir, names); sup.start(); failure = sup.wait(0.1); sup.stop(control, 10)`
(control: the run's RunControl)
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for_sentinels
from typing import TYPE_CHECKING, Any

from .._lifeline import PARENT_PID_VARIABLE
from ..process_signals import describe_signal, parent_signals_blocked

if TYPE_CHECKING:  # this module imports no torch (nor does hogwild/_lifeline.py, which `import hogwild` runs first)
    from ..share.run_state import RunControl


class WorkerFailed(RuntimeError):
    """A worker raised or was killed; the message names it and shows its traceback or signal."""

    def __init__(self, message: str, worker: int, checkpoint: str | None = None):
        super().__init__(message)
        self.worker, self.checkpoint = worker, checkpoint


class Supervisor:
    """Watches the worker processes; the parent's loop calls wait() between its own duties. A worker's traceback
    arrives as a file in `error_dir` (worker-<i>.error), written whole before it exits: a queue shared with the other
    workers would hold a lock while a worker writes, which a worker killed then would never release."""

    def __init__(self, processes: list[Any], error_dir: str, names: list[str],
                 respawn: Callable[[int], Any] | None = None):
        self.processes, self.error_dir, self.names, self.respawn = processes, error_dir, names, respawn
        self.tracebacks: dict[int, str] = {}
        self.failed_worker = -1  # the first worker found failed; -1 while none (or when an agent failed)
        self.restarts = 0  # workers replaced (replace)
        self._failure: str | None = None
        self._stopped: set[int] = set()  # workers stop() had to terminate or kill: their exit is not a failure
        # Set by the parent's loop: why a worker that ignored the stop request for `waited` seconds was hung (None:
        # merely slow), from its progress (progress_watch.ProgressWatch.describe_late).
        self.describe_late: Callable[[int, float], str | None] | None = None

    @staticmethod
    def error_file(error_dir: str, worker: int) -> str:
        return os.path.join(error_dir, f"worker-{worker}.error")

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
            if worker in self._stopped and self._traceback(worker) is None:
                continue  # terminated by stop(): a failure only if it had reported an error first
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

    def replace(self, worker: int) -> None:
        """Reap the failed `worker` (failure() or declare_hung found it) and start a fresh process in its place,
        `respawn(worker)` (the same WorkerSpec, with the feed's new queue); its failure is forgotten."""
        old = self.processes[worker]
        old.kill()  # a hung one is being killed already; a dead one is not signalled again
        old.join(5.0)
        self.tracebacks.pop(worker, None)
        try:
            os.unlink(self.error_file(self.error_dir, worker))
        except FileNotFoundError:
            pass
        self._stopped.discard(worker)
        self._failure, self.failed_worker = None, -1
        self.processes[worker] = self.respawn(worker)
        with parent_signals_blocked():
            self.processes[worker].start()
        self.restarts += 1

    def describe(self, worker: int, code: int) -> str:
        name = self.name(worker)
        text = self._traceback(worker)
        if text is not None:
            return f"{name} raised an exception:\n{text}"
        if code < 0:
            return f"{name} was killed by signal {describe_signal(-code)}"
        return f"{name} exited with status {code} before reporting an error (its stderr above says why)"

    def _traceback(self, worker: int) -> str | None:
        if worker not in self.tracebacks:
            try:
                with open(self.error_file(self.error_dir, worker), encoding="utf-8") as file:
                    self.tracebacks[worker] = file.read()
            except OSError:
                return None
        return self.tracebacks[worker]

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

