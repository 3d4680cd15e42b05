"""How the engine starts its worker processes: forked from a fork server that has imported torch and the worker's code
once, or spawned (a fresh interpreter per worker, which imports torch again: about 2 s of CPU each).

- `worker_context(config, multihost, *shared)` picks the method for a run: the fork server ("forkserver") on Linux
  when every worker is a 'cpu' one, what a worker receives passes in few enough file descriptors and the server can
  start (its socket's path in $TMPDIR must fit AF_UNIX's 107 bytes), else spawn. CUDA workers are spawned (their
  step has not been tried from a fork server), and so are a multi-host rank's (the rank's temporary folder, which
  multiprocessing's and the server's socket would be made in, goes with each run: multihost/leftovers.py).
  `HOGWILD_START_METHOD=spawn` (or `forkserver`) chooses.
- The fork server is the engine's own (fork_server.py): started from the main thread with a process's first forked
  worker (from another thread: spawn), kept for its later runs (a research script's second `hogwild.train` starts
  its workers in a fraction of a second), ended when the process exits. It ignores the signals a process group
  receives (a Ctrl-C or `timeout` is the parent's to handle, process_signals.py), as the workers do.
- A forked worker gets what a spawned one gets from its parent at start: the environment and the standard output and
  error (`ParentStreams`), which may have changed since the server started; the working directory and sys.path come
  with multiprocessing's preparation data. Its parent's main module is imported before that (with the environment of
  the server's start). Its parent is the server, which dies with the engine's process: it dies with the server
  (`launcher_pid`, process_prelude.py).

Serves step 3 of `hogwild.train` (start the workers).

Usage (engine.py): `ctx = worker_context(config, agent is not None, model, optimizer); spec = WorkerSpec(...,
parent_pid=launcher_pid(ctx), inherited=inherited(ctx))`
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from multiprocessing import context as mp_context, reduction
from typing import Any

import torch.multiprocessing as mp

from . import fork_server

START_METHOD_VARIABLE = "HOGWILD_START_METHOD"  # spawn | forkserver; unset: chosen per run
# The fork server receives a new process's descriptors in one message: multiprocessing refuses 252 and more, the
# kernel 254 (SCM_MAX_FD). Each shared tensor (parameters, optimizer state) is one; a queue and its pipes add a few.
MAX_DESCRIPTORS = 200


def worker_context(config: Any, multihost: bool, *shared: Any) -> Any:
    """The multiprocessing context the run's workers start from (see the module's docstring); multihost: the run is a
    rank of a multi-host job; `shared`: what every worker receives that holds shared tensors (model, optimizer)."""
    asked = method = requested_method()
    if not method:
        cpu_only = all(device == "cpu" for device in config.devices)
        forks = (sys.platform.startswith("linux") and cpu_only and not multihost
                 and passed_descriptors(*shared) <= MAX_DESCRIPTORS)
        method = "forkserver" if forks else "spawn"
    if method == "forkserver":
        try:
            fork_server.start()
        except fork_server.NotStarted as error:
            if asked:
                raise RuntimeError(f"{START_METHOD_VARIABLE}=forkserver: the fork server cannot start: {error}") \
                    from error
            return mp.get_context("spawn")
        return fork_server.context()
    return mp.get_context(method)


def requested_method() -> str:
    """$HOGWILD_START_METHOD: 'spawn', 'forkserver' or '' (unset: chosen per run); anything else is refused."""
    method = os.environ.get(START_METHOD_VARIABLE, "")
    if method not in ("", "spawn", "forkserver"):
        raise ValueError(f"{START_METHOD_VARIABLE}={method!r}: expected spawn or forkserver (or unset: forkserver for "
                         f"CPU workers on Linux)")
    return method


def launcher_pid(ctx: Any) -> int:
    """The process the workers are children of, and die with: this one, or the fork server (which dies with it;
    started again if it has died since the run began, for a replaced worker)."""
    if ctx is fork_server.context():
        fork_server.start()
        return fork_server.pid()
    return os.getpid()


def inherited(ctx: Any) -> ParentStreams | None:
    """What a forked worker must take from this process when it starts (None: a spawned one inherits it anyway)."""
    return ParentStreams() if ctx is fork_server.context() else None


class ParentStreams:
    """This process's environment, standard output and standard error as they are when a worker is started; `attach`
    (in the worker) makes them the worker's. Pickled only while starting a process (its descriptors travel with it)."""

    def __reduce__(self):
        streams = tuple(reduction.DupFd(fd) if _is_open(fd) else None for fd in (1, 2))
        return _AttachableStreams, (dict(os.environ), streams, _package())


@dataclass
class _AttachableStreams:
    environ: dict[str, str]
    streams: tuple[Any, Any]  # reduction.DupFd of fds 1 and 2 (None: closed in the parent)
    package: str  # the engine's hogwild package folder

    def attach(self) -> None:
        """In the worker, first thing in its prelude: refuse a server that did not run the preload (no lifeline) or
        imported another hogwild; take the parent's environment and streams; numpy's global generator reseeded
        (forked, every worker would draw the server's numbers; Python's random is reseeded at fork)."""
        if "hogwild.worker.forkserver_preload" not in sys.modules or _package() != self.package:
            raise RuntimeError(f"this worker's fork server did not import the engine's hogwild ({self.package}): "
                               f"{_package()}; {START_METHOD_VARIABLE}=spawn starts the workers without one")
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        for target, stream in zip((1, 2), self.streams):
            if stream is None:
                try:
                    os.close(target)
                except OSError:
                    pass
                continue
            fd = stream.detach()
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        if "numpy.random" in sys.modules:
            sys.modules["numpy.random"].seed()


def _package() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _CountingPopen:
    """Stands in for a starting process while `passed_descriptors` pickles: counts the descriptors it would pass."""

    def __init__(self):
        self.count = 0

    def duplicate_for_child(self, fd: int) -> int:
        self.count += 1
        return fd

    @staticmethod
    def DupFd(fd: int) -> None:  # noqa: N802 - multiprocessing's name
        return None


def passed_descriptors(*objects: Any) -> int:
    """How many file descriptors pickling `objects` for a starting process passes (one per shared CPU tensor's
    storage under torch's file_descriptor sharing); one past MAX_DESCRIPTORS when they cannot be pickled (the start
    itself will say why)."""
    if mp.get_sharing_strategy() != "file_descriptor":
        return 0  # file_system: shared tensors travel by name
    counter = _CountingPopen()
    mp_context.set_spawning_popen(counter)
    try:
        reduction.ForkingPickler.dumps(objects)
    except Exception:  # noqa: BLE001 - spawn, whose start raises the error where it always did
        return MAX_DESCRIPTORS + 1
    finally:
        mp_context.set_spawning_popen(None)
    return counter.count
