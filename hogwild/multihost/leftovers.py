"""What a rank leaves on its machine when the job is aborted, and the janitor process that removes it.

An aborted MPI job ends with MPICH's launcher killing each rank's process group at once (SIGKILL): no `finally`, no
atexit, and multiprocessing's resource tracker, a member of that group, dies with it. So the semaphores of the
engine's queues and locks (named `sem.mp-*`, or `sem.loky-<pid>-*` once joblib is imported: sacremoses imports it,
and loky renames every multiprocessing semaphore), MPICH's shared-memory file in /dev/shm and the rank's temporary
files would stay behind; a single-host run killed by a signal leaves no semaphores, since its tracker outlives it.

Each rank therefore starts a janitor in a session of its own, out of the launcher's reach. The janitor takes the
resource tracker's place in the rank (the workers spawned afterwards inherit it), keeps the names registered through
it, and passes every message on to the tracker that ran before, if any, which goes on as before. It also keeps two
kinds of its own: the rank's temporary folder (tempfile's folder while the rank runs: the engine's scratch goes
inside) and MPICH's /dev/shm files. Once every process holding its pipe is gone, it removes the folders, files,
semaphores and shared memory still registered, telling the previous tracker to forget the last two first (the
launcher's kill may reach that tracker before it cleans). A rank that ends normally removes its folder itself and
unregisters both kinds of its own: the janitor then has nothing to do.

Usage (train_distributed, on every rank):
    with RankFiles(f"hogwild-rank{rank}-"):
        ...  # an abort (os._exit, the launcher's SIGKILL) leaves the cleaning to the janitor

Run as a script (`python -I leftovers.py FD [PREVIOUS_TRACKER_FD]`) it is the janitor: stdlib only.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

FOLDER, FILE = "hogwild_folder", "hogwild_file"  # the janitor's own kinds, beside the tracker's
MPICH_SHM = "/dev/shm/mpich_shm_"  # MPICH's intra-node shared memory (ch4 shm), unlinked only by MPI_Finalize


class Janitor:
    """This process's janitor: started once, it lives until the process and its workers are gone."""

    _current: Janitor | None = None

    def __init__(self) -> None:
        from multiprocessing import resource_tracker
        tracker = resource_tracker._resource_tracker  # the module's one instance; ensure_running() keeps an _fd
        read, self._fd = os.pipe()
        with tracker._lock:
            previous = tracker._fd
            passed = [read] if previous is None else [read, previous]
            for fd in passed:
                os.set_inheritable(fd, True)
            try:
                # its own session: neither the launcher's kill of the rank's process group nor a terminal reaches it
                devnull = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                           (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
                os.posix_spawn(sys.executable, [sys.executable, "-I", os.path.abspath(__file__), *map(str, passed)],
                               os.environ, file_actions=devnull, setsid=True)
            finally:
                os.close(read)
                if previous is not None:
                    os.set_inheritable(previous, False)
            # _pid None: started by another process (as the tracker of a spawned child); the previous one's pipe
            # stays open here, so that it too ends only once this process has
            tracker._fd, tracker._pid = self._fd, None

    @classmethod
    def current(cls) -> Janitor:
        if cls._current is None:
            cls._current = cls()
        return cls._current

    def register(self, name: str, kind: str) -> bool:
        """Remove `name` (a FOLDER or a FILE) when this process is gone, unless unregistered by then. False when it
        cannot be: a name the tracker's one-line protocol cannot carry, or a janitor no longer there."""
        return self._send("REGISTER", name, kind)

    def unregister(self, name: str, kind: str) -> None:
        self._send("UNREGISTER", name, kind)

    def _send(self, command: str, name: str, kind: str) -> bool:
        message = f"{command}:{name}:{kind}\n".encode()
        if ":" in name or "\n" in name or len(message) > 512:  # 512: one atomic write to a pipe (POSIX PIPE_BUF)
            return False
        try:
            os.write(self._fd, message)
        except OSError:
            return False
        return True


class RankFiles:
    """A context for a rank's run: MPICH's /dev/shm files and a temporary folder of the rank's own (tempfile's
    default folder meanwhile, so the engine's scratch and any other temporary file go inside) are registered with
    the janitor. Leaving, even by an error, removes the folder; MPICH's files stay registered when an error leaves,
    since MPI_Abort follows and only the janitor outlives it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.janitor = Janitor.current()
        self.folder: str | None = None
        self.mpich_files: list[str] = []
        self._tempdir = None

    def __enter__(self) -> RankFiles:
        self.mpich_files = [path for path in sorted(mapped_shm_files()) if path.startswith(MPICH_SHM)
                            and self.janitor.register(path, FILE)]
        folder = tempfile.mkdtemp(prefix=self.prefix)
        if self.janitor.register(folder, FOLDER):
            self.folder, self._tempdir = folder, tempfile.tempdir
            tempfile.tempdir = folder
        else:  # a $TMPDIR the protocol cannot carry: temporary files go where they did
            os.rmdir(folder)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if self.folder is not None:
            tempfile.tempdir = self._tempdir
            shutil.rmtree(self.folder, ignore_errors=True)
            self.janitor.unregister(self.folder, FOLDER)
        if kind is None:
            for path in self.mpich_files:
                self.janitor.unregister(path, FILE)


def mapped_shm_files(pid: int | str = "self") -> set[str]:
    """The /dev/shm files process `pid` maps (not the deleted ones), from /proc/PID/maps; empty where there is none."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in lines if " /dev/shm/" in line and not line.endswith("(deleted)")}


# ---- the janitor's process -----------------------------------------------------------------------------------------
def _cleanups() -> dict:
    import _multiprocessing
    import _posixshmem
    return {"semaphore": _multiprocessing.sem_unlink, "shared_memory": _posixshmem.shm_unlink,
            FOLDER: shutil.rmtree, FILE: os.unlink}


def janitor_main(fd: int, previous: int | None) -> None:
    """Keep the registered names from `fd` until its end (passing the tracker's messages on to `previous`), then
    remove what is left: silently, since something is left only when the launcher killed the rank, which it and
    the aborting rank have reported."""
    for name in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # as the tracker: only the pipe's end ends it
        signal.signal(name, signal.SIG_IGN)
    registered: dict[str, set[str]] = {}
    with open(fd, "rb") as pipe:
        for line in pipe:
            command, _, rest = line.decode("ascii", "replace").rstrip("\n").partition(":")
            name, _, kind = rest.rpartition(":")
            if previous is not None and kind not in (FOLDER, FILE):
                previous = _pass_on(previous, line)
            if command == "REGISTER":
                registered.setdefault(kind, set()).add(name)
            elif command == "UNREGISTER":
                registered.get(kind, set()).discard(name)
    # Every process of the rank is gone: what is still registered is leaked, and cleaned here, even where the
    # previous tracker lives on, since the launcher's kill of the rank's process group may reach it before it has
    # read the end of its pipe (a rank killed with -9 then left its semaphores). It is told to forget them first.
    tracked = [(name, kind) for kind, names in registered.items() if kind not in (FOLDER, FILE) for name in names]
    for name, kind in tracked:
        if previous is not None:
            previous = _pass_on(previous, f"UNREGISTER:{name}:{kind}\n".encode())
    cleanups = _cleanups()
    for kind, names in registered.items():
        for name in names:
            try:
                cleanups[kind](name)
            except (KeyError, OSError):  # gone already (another rank's janitor, the owner), or a kind not ours
                pass


def _pass_on(fd: int, message: bytes) -> int | None:
    """Write `message` to the previous tracker; None once it is gone."""
    try:
        os.write(fd, message)
    except OSError:
        os.close(fd)
        return None
    return fd


if __name__ == "__main__":
    janitor_main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
