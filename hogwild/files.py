"""Writing run files so that nothing is half-written: whole-file replacement, whole-record appends to JSON-lines
logs (a torn last line left by a crash or a full disk is repaired before appending), one writer per section of
`config.json`, and write errors that name the file (a full disk otherwise reads as a bare errno, or as torch's
internal "enforce fail" text).

Serves steps 4 and 5 of `hogwild.train` (supervise, result): metrics, config.json and checkpoints are written
through it.

Usage: `write_text_atomic(path, text)`; `log = RecordLog(path); log.append({"kind": "train"}); log.close()`;
`update_sections(run_dir / "config.json", config=config.to_dict())`
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import IO, Any


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_MODE = _file_mode()  # what open() would give a new file (mkstemp's are private, 0600)


class WriteFailed(OSError):
    """A run file could not be written (full disk, read-only folder...); the message starts with the file's path."""

    def __str__(self) -> str:  # OSError would print "[Errno 28] ..."; the path comes first, as in file:line errors
        return str(self.strerror)


def describe_write_error(path: str | os.PathLike, error: BaseException) -> WriteFailed:
    """An OSError (or torch's RuntimeError from a failed write) -> WriteFailed naming `path` and, when the disk is
    full, saying so with the free space left."""
    path = os.fspath(path)
    code = getattr(error, "errno", None)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        usage = os.statvfs(folder)
        free = usage.f_bavail * usage.f_frsize
    except OSError:
        free = None
    if code == errno.ENOSPC or (code is None and free is not None and free < 1 << 20):
        reason = f"no space left on device ({free:,} bytes free in {folder})" if free is not None else \
            "no space left on device"
        code = errno.ENOSPC
    elif isinstance(error, OSError) and error.strerror:
        reason = error.strerror[0].lower() + error.strerror[1:]
    else:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    failed = WriteFailed(code or errno.EIO, f"{path}: cannot write: {reason}")
    failed.filename = path
    return failed


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call write(file) on a temporary file beside `path`, fsync it, rename it over `path` (then fsync the folder):
    readers and crashes see the old file or the new one, never part of one. Failures raise WriteFailed naming
    `path` and leave no temporary file behind."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
        os.fchmod(handle, _MODE)
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        temporary = None
        folder_handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder_handle)  # the rename itself survives a power loss
        finally:
            os.close(folder_handle)
    except (OSError, RuntimeError) as error:  # torch.save reports a failed write as RuntimeError
        raise describe_write_error(path, error) from None
    finally:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_atomic(path, lambda file: file.write(text.encode("utf-8")))


def update_sections(path: str | os.PathLike, **sections: Any) -> None:
    """Set top-level keys of a JSON object file, keeping the others: each writer owns its own keys (the engine
    `config` and `command`; run.py `run`, `model`, `devices`), and the file is replaced whole."""
    values: dict[str, Any] = {}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as file:
                loaded = json.load(file)
            values = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            values = {}  # a foreign or damaged file: this writer's sections replace it
    values.update(sections)
    write_text_atomic(path, json.dumps(values, indent=2, default=str) + "\n")


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Cut a last line that has no newline (a record torn by a crash or a full disk) off a JSON-lines file.
    Returns the number of bytes removed (0 when the file ends cleanly or does not exist)."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        keep, position = 0, size
        while position > 0:  # find the last newline, reading backwards in blocks
            step = min(1 << 16, position)
            position -= step
            file.seek(position)
            block = file.read(step)
            at = block.rfind(b"\n")
            if at >= 0:
                keep = position + at + 1
                break
        file.truncate(keep)
        return size - keep


class RecordLog:
    """Appends JSON records to a JSON-lines file, each as one whole line: a write that fails (full disk) is cut back
    off the file, so the file never holds half a record, and the error names the file. Opening repairs a torn last
    line (`repaired` says how many bytes were dropped)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self.repaired = repair_torn_tail(self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise describe_write_error(self.path, error) from None

    def append(self, record: dict[str, Any]) -> None:
        self.append_many([record])

    def append_many(self, records: Iterable[dict[str, Any]]) -> None:
        self.append_text("".join(json.dumps(record, default=str) + "\n" for record in records))

    def append_text(self, text: str) -> None:
        """Append whole lines (`text` ends with a newline) in one go, or nothing at all."""
        data = memoryview(text.encode("utf-8"))
        size = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as error:
            try:
                os.ftruncate(self._fd, size)  # no half record stays behind
            except OSError:
                pass
            raise describe_write_error(self.path, error) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
