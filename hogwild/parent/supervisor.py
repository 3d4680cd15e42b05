"""Process supervision: spawn, detect failures within seconds, stop cleanly, survive signals, leave no orphans.

- A worker that raises writes its traceback to a file and exits 1; one killed by a signal is named by that signal.
  Either way the parent replaces it while Config.max_restarts allows (`replace`; the parent's loop decides), else
  stops the others, writes a checkpoint and raises `WorkerFailed`.
- A worker that hangs (alive, no progress: progress_watch.py) is named the same way (`declare_hung`, which kills it);
  so is one that ignores a stop request for join_timeout when it had been without progress for many of its steps.
- SIGINT/SIGTERM/SIGHUP in the parent request a graceful stop (finish the step, checkpoint, return). Workers ignore
  them (PARENT_SIGNALS): Ctrl-C, `timeout`, batch schedulers and a closed terminal (a dropped SSH session) signal the
  whole process group, and the parent decides. After SIGHUP the terminal is gone: `detach_terminal` points the
  standard streams that were on it at /dev/null, so that the stop's messages do not fail with EIO.
- Workers die with the parent (prctl PR_SET_PDEATHSIG on Linux, plus a parent-pid check in their loop), also while
  they are still starting: `import hogwild` sets it first thing in the engine's workers (hogwild/_lifeline.py),
  before torch is imported (seconds, during which a killed parent's workers used to live on).

Serves steps 3 and 4 of `hogwild.train` (spawn, supervise).

Usage: `sup = Supervisor(processes, error_dir, names); sup.start(); failure = sup.wait(0.1); sup.stop(control, 10)`
(control: the run's RunControl)
"""
from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait as wait_for_sentinels
from typing import TYPE_CHECKING, Any

from .._lifeline import PARENT_PID_VARIABLE

if TYPE_CHECKING:  # this module imports no torch (nor does hogwild/_lifeline.py, which `import hogwild` runs first)
    from ..share.run_state import RunControl

PARENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # handled by the parent only; workers ignore them


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


@contextmanager
def parent_signals_blocked() -> Iterator[None]:
    """Block PARENT_SIGNALS while spawning workers (main thread only): a process inherits the blocked mask, so a
    Ctrl-C during its seconds of start-up does not kill it mid-import; the parent receives the signal afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(PARENT_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with SIGHUP ignored (main thread only). The tracker, a process of
    the run's process group started by the first semaphore or queue, ignores SIGINT and SIGTERM but not SIGHUP: a
    closed terminal would kill it, and its relaunch prints a traceback (what it tracked may leak). An ignored signal
    stays ignored across exec; a tracker already running is left as it is."""
    from multiprocessing import resource_tracker
    if threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


class _ReaderGone:
    """A standard stream that outlives its reader, or its disk: once a write or flush fails (a closed pipe, `run.py |
    head`; a full disk; an I/O error), the stream's descriptor is pointed at /dev/null and the process goes on; the
    run's record is its run directory (metrics.jsonl, summary.json). A closed pipe is the reader's choice and goes
    silently; any other failure is named once, with the stream, on `other` (the other standard stream, or None: not
    named). Without it the next progress or evaluation line stopped training."""

    def __init__(self, stream: Any, name: str, prog: str, other: str | None):
        self._stream, self._name, self._prog, self._other = stream, name, prog, other

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            self._lost(error)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            self._lost(error)

    def _lost(self, error: OSError) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)
        try:
            self._stream.flush()  # what was buffered goes to /dev/null now
        except (OSError, ValueError):
            pass
        if self._other is not None and not isinstance(error, BrokenPipeError):
            reason = (error.strerror or str(error)).lower()
            print(f"{self._prog}: warning: {self._name}: cannot write ({reason}); nothing more is written there (a "
                  f"run's record stays in its directory: metrics.jsonl, summary.json)", file=getattr(sys, self._other),
                  flush=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def outlive_closed_output(prog: str = "hogwild", stdout_is_data: bool = False) -> None:
    """Make the standard streams safe for a process that needs no terminal (the parent and every worker): a closed
    one (`run.py >&-`) is reopened on /dev/null before any file can take its descriptor (a message would land in that
    file), and sys.stdout and sys.stderr survive a write that fails (see _ReaderGone; prog names the process in its
    warning). stdout_is_data: stdout carries the command's output (`run.py tag`), where no warning may go."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:  # closed
            null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # as a standard stream is: the workers get it too
            setattr(sys, name, open(fd, mode, closefd=False, **({"buffering": 1} if mode == "w" else {})))
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _ReaderGone):
            other = "stderr" if name == "stdout" else None if stdout_is_data else "stdout"
            setattr(sys, name, _ReaderGone(stream, name, prog, other))


def detach_terminal() -> None:
    """After SIGHUP: point stdin, stdout and stderr at /dev/null where they are a terminal (a character device), which
    has hung up and fails every write with EIO (Python would then exit 120 flushing stdout); files and pipes keep
    what follows. A hung-up terminal no longer answers isatty(), so the file type decides."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        device = os.fstat(null).st_rdev
        for fd in (0, 1, 2):
            try:
                mode = os.fstat(fd)
            except OSError:
                continue
            if stat.S_ISCHR(mode.st_mode) and mode.st_rdev != device:
                os.dup2(null, fd)
    finally:
        os.close(null)


@contextmanager
def graceful_signals(on_signal: Callable[[str], None]) -> Iterator[None]:
    """While active, SIGINT, SIGTERM and SIGHUP call on_signal(name) instead of killing the parent (main thread
    only); SIGHUP first detaches the hung-up terminal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(number: int, frame: Any) -> None:
        if number == signal.SIGHUP:
            detach_terminal()
        on_signal(describe_signal(number))

    for number in PARENT_SIGNALS:
        previous[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
