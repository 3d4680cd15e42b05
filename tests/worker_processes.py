"""The engine's worker processes of a process, found in /proc: spawned ones are its children running multiprocessing's
spawn_main; forked ones (CPU workers: hogwild/worker/start_method.py) are the children of its fork server."""
from __future__ import annotations

import pathlib


def children_of(pid: int) -> list[int]:
    """The child processes of `pid` (those of every thread of it), from /proc/PID/task/*/children."""
    children = []
    for listing in pathlib.Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children += [int(child) for child in listing.read_text().split()]
        except OSError:  # the thread or the process has just exited
            continue
    return children


def _command(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


def worker_pids(pid: int) -> list[int]:
    """The worker processes process `pid` started, spawned or forked from its fork server."""
    found = []
    for child in children_of(pid):
        command = _command(child)
        if b"spawn_main" in command:
            found.append(child)
        elif b"multiprocessing.forkserver" in command:
            found.extend(children_of(child))
    return sorted(found)
