"""Imported once, first thing in the fork server the engine's CPU workers are forked from (start_method.py): the server
dies with the engine's process (PR_SET_PDEATHSIG) and each process it forks dies with the server from its first
instruction on, before it loads the parent's main module (a slow import must not outlive a killed parent); the
signals of the process group are ignored, as the workers ignore them (a Ctrl-C or `timeout` stops the run through
the parent, which then ends the server by exiting); then torch and the workers' code are imported, so that a worker
starts without importing them.

Serves step 3 of `hogwild.train` (start the workers).

Usage: nothing to call: `ctx.set_forkserver_preload(["hogwild.worker.forkserver_preload"])`.
"""
import functools
import importlib
import os
import signal

from .._lifeline import die_with_parent
from ..process_signals import PARENT_SIGNALS


def _die_with_the_server(server: int) -> None:
    """In a process the server forks (a worker), not in one a worker forks (which inherits this hook)."""
    if os.getppid() == server:
        die_with_parent(server)


die_with_parent(os.getppid())  # the engine's process, which started this server
for _number in PARENT_SIGNALS:
    signal.signal(_number, signal.SIG_IGN)
os.register_at_fork(after_in_child=functools.partial(_die_with_the_server, os.getpid()))

for _module in ("torch", "torch.multiprocessing",  # its reductions rebuild the shared tensors a worker receives
                "hogwild.worker.worker", "hogwild.worker.sync", "hogwild.models"):  # the workers, the models' losses
    importlib.import_module(_module)
