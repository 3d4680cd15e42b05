"""Imported once in the engine's fork server (fork_server.py), as its import ends (importing the hogwild package
imports torch first: seconds, with the parent's signals blocked): the server dies with the engine's process from then
on (PR_SET_PDEATHSIG; at once if that has already exited), and each process the server forks dies with the server
from its first instruction on, before it imports the parent's main module (a slow import must not outlive a killed
parent). The signals of the process group are ignored, as the workers ignore them: a Ctrl-C or `timeout` stops the
run through the parent. Then the workers' code is imported, so that a worker starts without importing it.

Serves step 3 of `hogwild.train` (start the workers).

Usage: nothing to call: fork_server.PRELOADED names it.
"""
import importlib
import os
import signal

from .._lifeline import die_with_parent
from ..process_signals import PARENT_SIGNALS
from .fork_server import SERVER_PARENT_VARIABLE

_SERVER = os.getpid()
_forking = [0]  # the pid of the process about to fork (this server, or a worker that forks a process of its own)


def _before_fork() -> None:
    _forking[0] = os.getpid()


def _die_with_the_server() -> None:
    """In a process the server forks (a worker), not in one a worker forks (it inherits this hook)."""
    if _forking[0] == _SERVER:
        die_with_parent(_SERVER)


die_with_parent(int(os.environ[SERVER_PARENT_VARIABLE]))
for _number in PARENT_SIGNALS:
    signal.signal(_number, signal.SIG_IGN)
os.register_at_fork(before=_before_fork, after_in_child=_die_with_the_server)

for _module in ("torch.multiprocessing",  # its reductions rebuild the shared tensors a worker receives
                "hogwild.worker.worker", "hogwild.worker.sync", "hogwild.models"):  # the workers, the models' losses
    importlib.import_module(_module)
