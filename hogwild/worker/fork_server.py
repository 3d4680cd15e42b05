"""The engine's own fork server: a child of the engine's process, started from its main thread with the run's first
forked worker and kept for its later runs, that has imported torch and the workers' code once
(forkserver_preload.py) and forks each CPU worker from there. It is multiprocessing's ForkServer, but a private
instance: multiprocessing's shared one may have been started by the user's own code without hogwild's preload (no
lifeline), and the workers' signal rules must not reach the processes the user starts through it.

The server starts with the parent's signals blocked (process_signals.parent_signals_blocked), the engine's sys.path
as its PYTHONPATH (it imports the engine's hogwild, not another copy) and the engine's pid in SERVER_PARENT_VARIABLE
(it dies with the engine). It ends when the engine's process and every worker have exited.

Serves step 3 of `hogwild.train` (start the workers).

Usage (start_method.py): `ctx = context()` after `start()`; `pid()`
"""
from __future__ import annotations

import io
import os
import sys
import threading
from multiprocessing import forkserver, popen_forkserver, process, reduction, spawn, util
from multiprocessing.context import ForkServerContext, set_spawning_popen

from ..process_signals import parent_signals_blocked

SERVER_PARENT_VARIABLE = "HOGWILD_SERVER_PARENT_PID"  # the server's environment names the process it dies with
PRELOADED = ["hogwild.worker.forkserver_preload"]  # not the parent's main module: each worker imports that itself
_SERVER = forkserver.ForkServer()
_SERVER.set_forkserver_preload(PRELOADED)


class NotStarted(Exception):
    """The server cannot be started here (not the main thread, or its socket could not be made)."""


def start() -> None:
    """Start the server if it is not running (main thread only: its start blocks the parent's signals there)."""
    if threading.current_thread() is not threading.main_thread():
        raise NotStarted("not the main thread")
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", SERVER_PARENT_VARIABLE)}
    os.environ["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
    os.environ[SERVER_PARENT_VARIABLE] = str(os.getpid())
    try:
        with parent_signals_blocked():  # inherited: the server's seconds of import are not cut short by a Ctrl-C
            _SERVER.ensure_running()
    except OSError as error:  # e.g. its socket's path, in a deep $TMPDIR, over AF_UNIX's 107 bytes
        raise NotStarted(str(error)) from error
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pid() -> int:
    """The running server's pid (start() first)."""
    return _SERVER._forkserver_pid  # noqa: SLF001 - ForkServer keeps it nowhere public


class _Popen(popen_forkserver.Popen):
    """multiprocessing's forkserver Popen, through the engine's server."""

    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = _SERVER.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)  # the child's sentinel of its parent, as multiprocessing keeps it
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as file:
            file.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(process.BaseProcess):
    _start_method = "forkserver"

    @staticmethod
    def _Popen(process_obj):  # noqa: N802 - multiprocessing's name
        return _Popen(process_obj)


class _Context(ForkServerContext):
    Process = _Process


_CONTEXT = _Context()


def context() -> _Context:
    """The multiprocessing context whose processes the engine's server forks (queues and locks as forkserver's)."""
    return _CONTEXT
