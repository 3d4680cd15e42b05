"""One run per run directory: an exclusive lock file (`<run dir>/run.lock`) holding the owner's pid, host and start
time, so that a second `run.py` with the same `--out` stops at once, naming the process that holds it, instead of
interleaving metrics and replacing checkpoints.

The lock is `fcntl.flock` on the file: the kernel releases it when its holder exits, however it exits, so a lock
left by a killed run (kill -9, power loss) is free and the next run takes it over. The holder removes the file when
it finishes. flock is per host: two hosts sharing a folder over NFS are not kept apart (docs/reliability.md).

The file is opened without following a symbolic link: a run.lock that is a link or not a regular file is refused
(NotALockFile) and left as it is. `live_holder(run_dir)` tells a reader (`run.py tag`) whether a run holds it.

Usage: `with RunDirLock(run_dir): ...` (raises RunDirBusy naming the holder)
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path

LOCK_FILE = "run.lock"


class RunDirBusy(RuntimeError):
    """Another live process holds the run directory."""


class NotALockFile(ValueError):
    """run.lock is not a lock file: a symbolic link, a folder, a device."""


class RunDirLock:
    """Exclusive, non-blocking ownership of a run directory for this process (the directory must exist)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        self.took_over: dict | None = None  # the previous holder's record when a stale lock file was taken over

    def acquire(self) -> "RunDirLock":
        while True:
            fd = _open_lock_file(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise busy(self.path.parent, holder) from None
            except BaseException:
                os.close(fd)
                raise
            # The holder we waited out may have removed the file just before we locked it: lock the file that is
            # there now (the usual flock-and-unlink protocol), else two runs could each hold a different file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = _read_holder(fd)
        self.took_over = previous or None  # a record there means its holder died without removing the file
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                             "started_at": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and release the lock (unlink first, so that no one locks a file about to vanish
        without noticing: see acquire)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def busy(run_dir: str | os.PathLike, holder: dict) -> RunDirBusy:
    """The error of a run directory a live run holds (`holder`: its record)."""
    return RunDirBusy(f"--out {run_dir}: run directory is in use by {describe_holder(holder)}; wait for it to finish, "
                      f"stop it, or choose another --out")


def live_holder(run_dir: str | os.PathLike) -> dict | None:
    """The record ({"pid", "host", "started_at", ...}; {} before it is written) of the live process that holds
    run_dir's lock, i.e. a run still training there; None when no process does. Only reads: the file is opened
    read-only without following a link, and a shared lock is tried and released at once."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        return holder
    os.close(fd)  # closing releases the shared lock
    return None


def _open_lock_file(path: Path) -> int:
    """The lock file, opened (created) without following a symbolic link: a run.lock that is a link, a folder or
    anything but a regular file was not written by run.py, and writing the holder's record through it would
    truncate whatever it points to. It is refused, naming it; the user removes it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        fd = None
    if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd is not None:
        os.close(fd)
    what = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else "not a regular file"
    raise NotALockFile(f"--out {path.parent}: {path} is {what}, not a lock file written by run.py; it is left as it "
                      f"is (remove it if no run uses this directory)")


def _read_holder(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data.decode("utf-8")) if data.strip() else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def describe_holder(holder: dict) -> str:
    """'pid P (started ...)': the holder of a lock, as messages name it."""
    if not holder.get("pid"):
        return "another process (it has not written its pid yet)"
    where = f" on {holder['host']}" if holder.get("host") and holder["host"] != socket.gethostname() else ""
    return f"pid {holder['pid']}{where} (started {holder.get('started_at', '?')})"
