"""Helpers of the misuse tests: run.py in its own session (so that every process it leaves behind is found), the
/dev/shm entries it created, and a byte-for-byte fingerprint of a run directory."""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.tasks.helpers import REPO


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    leftover_processes: list[str]  # 'pid command' of its session's processes alive 15 s after it exited
    leftover_shm: list[str]  # /dev/shm entries named after its pid


def session_members(session: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = pathlib.Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # fields: state ppid pgrp session ...
            members.append(int(entry))
    return members


def run_py_session(*args: str, timeout: float = 240, env: dict | None = None) -> Finished:
    """`python run.py ARGS` from the repo root as the leader of a new session."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
                   "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache"), **(env or {})}
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), *args], cwd=REPO, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    members, deadline = session_members(process.pid), time.monotonic() + 15
    while members and time.monotonic() < deadline:  # e.g. multiprocessing's resource tracker, exiting after it
        time.sleep(0.1)
        members = session_members(process.pid)
    leftover = [f"{pid} {_command(pid)}" for pid in members]
    shm = [name for name in os.listdir("/dev/shm") if f"_{process.pid}_" in name or name.endswith(f"_{process.pid}")]
    return Finished(process.returncode, stdout, stderr, leftover, shm)


def _command(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def fingerprint(folder: pathlib.Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}
