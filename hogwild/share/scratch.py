"""A run's scratch folder in $TMPDIR (`hogwild-*`: the batch store's file, the workers' error files, the sync
rendezvous): made when the workers are spawned, removed when the run ends. A parent killed with kill -9 cannot remove
its own, so every run first removes the scratch folders whose run is gone. A run holds an flock on its folder's
`.owner` file while it lives: the kernel drops it with the process, which a pid cannot tell across containers that
share $TMPDIR. The data cache makes the folders it prepares an entry in the same way (`.<key>.*` under the cache:
data/cache.py), so that the next run removes those of a preparation killed half-way.

Serves step 3 of `hogwild.train` (spawn).

Usage: `scratch = make_scratch()` ... `remove_scratch(scratch)`; `folder = make_scratch(".key.", root)` ...
`release(folder)` before renaming it elsewhere
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

PREFIX = "hogwild-"
OWNER = ".owner"  # created already locked (under another name, then renamed): a sweep never sees it unlocked
_held: dict[str, int] = {}  # scratch folder -> the descriptor holding its lock


def make_scratch(prefix: str = PREFIX, root: str | os.PathLike | None = None) -> str:
    """Remove the scratch folders of runs that are gone (named `prefix*` in root, $TMPDIR by default), then make this
    run's, locked while this process lives."""
    remove_abandoned(root, prefix)
    folder = tempfile.mkdtemp(prefix=prefix, dir=root)
    fd = os.open(os.path.join(folder, OWNER + ".new"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(os.path.join(folder, OWNER + ".new"), os.path.join(folder, OWNER))
    _held[folder] = fd
    return folder


def remove_scratch(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)


def release(folder: str) -> None:
    """Drop the folder's `.owner` file and its lock, keeping the rest (a cache entry about to be renamed into place).
    A sweep leaves a folder without `.owner` alone."""
    fd = _held.pop(folder, None)
    try:
        os.unlink(os.path.join(folder, OWNER))
    except FileNotFoundError:
        pass
    if fd is not None:
        os.close(fd)


def remove_abandoned(root: str | os.PathLike | None = None, prefix: str = PREFIX) -> list[str]:
    """Remove the folders named `prefix*` in root ($TMPDIR) whose `.owner` lock no process holds; returns them. A
    folder without one (being made, or not a scratch folder) is left alone, as is one this user cannot open."""
    removed = []
    try:
        entries = list(os.scandir(root or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, OWNER), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its run is alive
        else:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed
