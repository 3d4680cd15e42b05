"""What a process of a run does with the signals and standard streams of its process group: Ctrl-C, `timeout`,
batch schedulers and a closed terminal (a dropped SSH session) signal the whole group, and the parent alone decides.

- SIGINT/SIGTERM/SIGHUP in the parent request a graceful stop (`graceful_signals`: finish the step, checkpoint,
  return). Workers ignore them (PARENT_SIGNALS, set by the worker's prelude); they are blocked while the parent spawns
  (`parent_signals_blocked`), so a Ctrl-C during a worker's seconds of start-up does not kill it mid-import.
- After SIGHUP the terminal is gone: `detach_terminal` points the standard streams that were on it at /dev/null, so
  that the stop's messages do not fail with EIO. A closed or failing standard stream never ends a process
  (`outlive_closed_output`), and multiprocessing's resource tracker is started with SIGHUP ignored
  (`start_resource_tracker`).
- Once a command has ended and decided its exit status, `ended` ignores Ctrl-C: the interpreter's teardown is not
  interrupted into a traceback.
- A signal the process was started with ignored stays ignored (`take_over`): `nohup python run.py ...` ignores
  SIGHUP, a shell script's background job (`python run.py ... &`) SIGINT; the run goes on through a hang-up or a
  Ctrl-C meant for the foreground, as the person who started it asked.

A leaf: it imports nothing of the engine and no torch, so the worker's prelude (hogwild/worker/), the parent
(hogwild/parent/, engine.py) and run.py's own handlers (hogwild/tasks/) take the same rules from one place.

Serves steps 3 and 4 of `hogwild.train` (spawn, supervise) and run.py around them.

Usage: `with graceful_signals(on_signal): ...` in the parent; `for number in PARENT_SIGNALS: signal.signal(number,
signal.SIG_IGN)` in a worker; `outlive_closed_output(prog)` first thing in every process
"""
from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

PARENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # handled by the parent only; workers ignore them


def take_over(numbers: Iterable[int], handler: Callable[[int, Any], Any]) -> dict[int, Any]:
    """Set `handler` for every signal of `numbers` not ignored now (main thread only) -> the handlers it replaced, for
    `give_back`. An ignored one was ignored by whoever started the process (`nohup`, a background job), or by its
    embedding code, and stays so."""
    return {number: signal.signal(number, handler) for number in numbers
            if signal.getsignal(number) != signal.SIG_IGN}


def give_back(previous: dict[int, Any]) -> None:
    """Restore the handlers `take_over` replaced."""
    for number, handler in previous.items():
        signal.signal(number, handler)


def describe_signal(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"



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


def ended() -> None:
    """A command's process has ended its work and decided its exit status: a Ctrl-C now (an impatient second one as a
    run stops) would only interrupt the interpreter's teardown, torch's atexit finalizers printing a KeyboardInterrupt
    traceback. SIGINT is ignored from here (hogwild.tasks.cli.console: run.py and the installed command)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    only; one the process was started with ignored stays ignored: `take_over`); SIGHUP first detaches the hung-up
    terminal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(number: int, frame: Any) -> None:
        if number == signal.SIGHUP:
            detach_terminal()
        on_signal(describe_signal(number))

    previous = take_over(PARENT_SIGNALS, handler)
    try:
        yield
    finally:
        give_back(previous)
