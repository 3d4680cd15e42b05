"""Helpers of the misuse tests: run.py in its own session (so that every process it leaves behind is found), the
/dev/shm entries it created, and a byte-for-byte fingerprint of a run directory. `RunPyForker` runs many such cases
from one interpreter that imported run.py's modules once: each case is a process of its own, forked from it.

Usage: `done = run_py_session("--steps", "5", "--out", run)`; `with RunPyForker() as forker: forker.run(...)`
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import tempfile
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


def _environment(env: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
            "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache"), **(env or {})}


def run_py_session(*args: str, timeout: float = 240, env: dict | None = None) -> Finished:
    """`python run.py ARGS` from the repo root as the leader of a new session."""
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), *args], cwd=REPO, env=_environment(env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    return _finished(process.pid, process.returncode, stdout, stderr)


def _finished(pid: int, returncode: int, stdout: str, stderr: str) -> Finished:
    """What session `pid` (its leader exited with `returncode`) left behind."""
    members, deadline = session_members(pid), time.monotonic() + 15
    while members and time.monotonic() < deadline:  # e.g. multiprocessing's resource tracker, exiting after it
        time.sleep(0.1)
        members = session_members(pid)
    leftover = [f"{member} {_command(member)}" for member in members]
    shm = [name for name in os.listdir("/dev/shm") if f"_{pid}_" in name or name.endswith(f"_{pid}")]
    return Finished(returncode, stdout, stderr, leftover, shm)


# The forker: imports what run.py imports, then per request (a JSON line: argv, stdout file, stderr file) forks a
# child that becomes a session leader, points its fds 0-2 at /dev/null and the files, and runs run.py as __main__ in
# place of `python run.py ARGV` (its own exit, atexit handlers and teardown included); the forker answers the child's
# pid, then its exit status (negative: killed by that signal, as subprocess says). It never calls torch itself: a
# fork inherits no thread pool. A case pays neither an interpreter start nor torch's import.
_FORKER = r"""
import gc, json, os, runpy, sys
from hogwild.tasks import cli, inference, plotting, training  # the seconds of run.py's imports, paid once here
gc.freeze()  # what is imported stays out of the children's collections: they copy none of its pages on exit

def serve():
    answer = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        argv, out, err = json.loads(line)
        pid = os.fork()
        if pid == 0:
            answer.close()
            return argv, out, err
        answer.write(f"{pid}\n"); answer.flush()
        answer.write(f"{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\n"); answer.flush()
    raise SystemExit(0)

argv, out, err = serve()
os.setsid()
for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
    os.dup2(os.open(path, flags), fd)
sys.argv = argv
runpy.run_path(argv[0], run_name="__main__")
"""


class RunPyForker:
    """`python run.py ARGS` as the leader of a new session, forked from one interpreter that imported run.py's
    modules once (torch's import is most of a failing run.py's seconds); the environment is run_py_session's."""

    def __init__(self):
        self._process = subprocess.Popen([sys.executable, "-c", _FORKER], cwd=REPO, env=_environment(),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._pending = b""

    def __enter__(self) -> RunPyForker:
        return self

    def __exit__(self, *_) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=60)

    def run(self, *args: str, timeout: float = 240) -> Finished:
        with tempfile.TemporaryDirectory() as folder:
            out, err = pathlib.Path(folder, "stdout"), pathlib.Path(folder, "stderr")
            out.touch()
            err.touch()
            request = [[str(REPO / "run.py"), *args], str(out), str(err)]
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            pid = int(self._answer(60))
            try:
                returncode = int(self._answer(timeout))
            except TimeoutError:
                os.killpg(pid, signal.SIGKILL)
                returncode = int(self._answer(60))
            return _finished(pid, returncode, out.read_text(), err.read_text())

    def _answer(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self._process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"run.py gave no answer within {timeout} s")
            chunk = os.read(self._process.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the run.py forker exited with {self._process.wait()}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()


def _command(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def fingerprint(folder: pathlib.Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}
