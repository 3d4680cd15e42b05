"""The engine's worker processes of a process, found in /proc: spawned ones are its children running multiprocessing's
spawn_main; forked ones (CPU workers: hogwild/worker/start_method.py) are the children of its fork server."""
from __future__ import annotations

import os


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    parent = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                found.append(int(entry))
    return found


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
