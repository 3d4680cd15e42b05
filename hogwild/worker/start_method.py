"""How the engine starts its worker processes: forked from a fork server that has imported torch and the worker's code
once, or spawned (a fresh interpreter per worker, which imports torch again: about 2 s of CPU each).

- `worker_context(config, multihost, *shared)` picks the method for a run: the fork server ("forkserver") on Linux
  when every worker is a 'cpu' one, what a worker receives passes in few enough file descriptors and the server can
  start (its socket's path in $TMPDIR must fit AF_UNIX's 107 bytes), else spawn. CUDA workers are spawned (their
  step has not been tried from a fork server), and so are a multi-host rank's (the rank's temporary folder, which
  multiprocessing's and the server's socket would be made in, goes with each run: multihost/leftovers.py).
  `HOGWILD_START_METHOD=spawn` (or `forkserver`) chooses.
- The fork server is multiprocessing's: one per parent process, started with the run's first worker, kept for the
  later runs of that process (a research script's second `hogwild.train` starts its workers in milliseconds), ended
  when the parent exits. It ignores the signals a process group receives (a Ctrl-C or `timeout` is the parent's to
  handle, process_signals.py), as the workers do.
- A forked worker gets what a spawned one gets from its parent at start: the environment and the standard output and
  error (`ParentStreams`), which may have changed since the server started; the working directory and sys.path come
  with multiprocessing's preparation data. Its parent is the server, which exits with the engine's process: it dies
  with the server (`launcher_pid`, process_prelude.py).

Serves step 3 of `hogwild.train` (start the workers).

Usage (engine.py): `ctx = worker_context(config, agent is not None, model, optimizer); spec = WorkerSpec(...,
parent_pid=launcher_pid(ctx), inherited=inherited(ctx))`
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from multiprocessing import context as mp_context, forkserver, reduction
from typing import Any

import torch.multiprocessing as mp

from ..process_signals import parent_signals_blocked

START_METHOD_VARIABLE = "HOGWILD_START_METHOD"  # spawn | forkserver; unset: chosen per run
# The fork server receives a new process's descriptors in one message: multiprocessing refuses 252 and more, the
# kernel 254 (SCM_MAX_FD). Each shared tensor (parameters, optimizer state) is one; a queue and its pipes add a few.
MAX_DESCRIPTORS = 200
# What the server imports once. Not the parent's main module (multiprocessing's default): each worker imports that
# itself, as a spawned one does, after the lifeline the preload gives it.
PRELOADED = ["hogwild.worker.forkserver_preload"]


def worker_context(config: Any, multihost: bool, *shared: Any) -> Any:
    """The multiprocessing context the run's workers start from (see the module's docstring); multihost: the run is a
    rank of a multi-host job; `shared`: what every worker receives that holds shared tensors (model, optimizer)."""
    method = requested_method()
    if not method:
        cpu_only = all(device == "cpu" for device in config.devices)
        forks = (sys.platform.startswith("linux") and cpu_only and not multihost
                 and passed_descriptors(*shared) <= MAX_DESCRIPTORS)
        method = "forkserver" if forks else "spawn"
    if method == "forkserver":
        try:
            _start_the_server()
        except OSError as error:  # e.g. its socket's path, in a deep $TMPDIR, over AF_UNIX's 107 bytes
            if requested_method():
                raise RuntimeError(f"{START_METHOD_VARIABLE}=forkserver: the fork server cannot start: {error}") \
                    from error
            method = "spawn"
    return mp.get_context(method)


def _start_the_server() -> None:
    """Start multiprocessing's fork server now (a running one is kept), so that launcher_pid knows its pid."""
    mp.get_context("forkserver").set_forkserver_preload(PRELOADED)
    with parent_signals_blocked():  # inherited: the server's seconds of import are not cut short by a Ctrl-C
        forkserver.ensure_running()


def requested_method() -> str:
    """$HOGWILD_START_METHOD: 'spawn', 'forkserver' or '' (unset: chosen per run); anything else is refused."""
    method = os.environ.get(START_METHOD_VARIABLE, "")
    if method not in ("", "spawn", "forkserver"):
        raise ValueError(f"{START_METHOD_VARIABLE}={method!r}: expected spawn or forkserver (or unset: forkserver for "
                         f"CPU workers on Linux)")
    return method


def launcher_pid(ctx: Any) -> int:
    """The process the workers are children of, and die with: this one, or the fork server (which exits with it)."""
    if ctx.get_start_method() == "forkserver":
        return forkserver._forkserver._forkserver_pid  # noqa: SLF001 - multiprocessing keeps it nowhere public
    return os.getpid()


def inherited(ctx: Any) -> ParentStreams | None:
    """What a forked worker must take from this process when it starts (None: a spawned one inherits it anyway)."""
    return ParentStreams() if ctx.get_start_method() == "forkserver" else None


class ParentStreams:
    """This process's environment, standard output and standard error as they are when a worker is started; `attach`
    (in the worker) makes them the worker's. Pickled only while starting a process (its descriptors travel with it)."""

    def __reduce__(self):
        streams = tuple(reduction.DupFd(fd) if _is_open(fd) else None for fd in (1, 2))
        return _AttachableStreams, (dict(os.environ), streams)


@dataclass
class _AttachableStreams:
    environ: dict[str, str]
    streams: tuple[Any, Any]  # reduction.DupFd of fds 1 and 2 (None: closed in the parent)

    def attach(self) -> None:
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
    counter = _CountingPopen()
    mp_context.set_spawning_popen(counter)
    try:
        reduction.ForkingPickler.dumps(objects)
    except Exception:  # noqa: BLE001 - spawn, whose start raises the error where it always did
        return MAX_DESCRIPTORS + 1
    finally:
        mp_context.set_spawning_popen(None)
    return counter.count
