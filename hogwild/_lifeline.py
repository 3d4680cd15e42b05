"""A worker's lifeline to its parent: it dies when the parent does, from the first line of `import hogwild` on.

A spawned worker takes seconds to import torch; a parent killed then (kill -9, the OOM killer) used to leave its
starting workers alive for as long. `import hogwild` therefore calls `die_while_starting` before anything else, and
this module imports nothing heavy (no torch, nothing of the engine). The worker's prelude calls `die_with_parent`
again (hogwild/worker/process_prelude.py); the parent names its workers `WORKER_NAMES` and tells them its pid in
`PARENT_PID_VARIABLE` (hogwild/parent/supervisor.py).

Serves step 3 of `hogwild.train` (spawn).

Usage: nothing to call: `import hogwild` runs it in a worker.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
WORKER_NAMES = ("hogwild-worker-", "hogwild-sync-")  # the names of the engine's worker processes (a prefix)
PARENT_PID_VARIABLE = "HOGWILD_PARENT_PID"  # the environment tells a starting worker which parent it dies with


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass  # no libc.so.6 (e.g. musl): the worker loop's getppid() check still applies
    if os.getppid() != parent_pid:
        os._exit(1)


def die_while_starting(process_name: str) -> None:
    """In a worker the engine spawned (named WORKER_NAMES), as soon as `import hogwild` starts: die with the parent
    from now on, or now if it has already exited (its prelude does the same, but only after torch is imported)."""
    parent = os.environ.get(PARENT_PID_VARIABLE, "")
    if process_name.startswith(WORKER_NAMES) and parent.isdigit():
        die_with_parent(int(parent))
