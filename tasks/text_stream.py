"""The text that goes through `run.py tag` and `run.py translate`, streamed so that input of any length runs in bounded
memory and each answer appears as soon as its line is done: input lines (files, or stdin when there is none or a path
is '-') are read as they arrive and handed on in chunks of at most CHUNK_LINES lines or CHUNK_BYTES bytes, fewer when
the input has nothing more ready (a line typed at a terminal is answered at once); each chunk's output is written and
flushed before the next chunk is read. A byte-order mark at the start of an input is dropped (as the training
corpora's); a line that cannot be read (not in the encoding, over MAX_LINE_BYTES, or over `max_words` words) stops the
command naming `file:line`: what came before it has been written to stdout, and --output is left as it was.

Usage:
    with TextOutput(args.output) as output:
        for lines in read_chunks(args.files, "utf-8"):
            output.write([line.upper() for line in lines])
"""
from __future__ import annotations

import collections
import os
import select
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from hogwild.data.compressed import BOM
from hogwild.files import describe_write_error

CHUNK_LINES = 256  # lines per chunk: one pass of tagging or translating, then its output is written
CHUNK_BYTES = 1 << 20  # and at most this much input text per chunk
MAX_LINE_BYTES = 1 << 20  # a longer line (e.g. /dev/zero, which has none) is refused instead of read whole
_READ = 1 << 16


class InputError(ValueError):
    """An input file that cannot be read, named with its line when the problem is on one."""


class ReaderGone(Exception):
    """The reader of stdout closed it (`run.py tag ... | head`): there is no one left to answer."""


class OutputError(ValueError):
    """stdout cannot be written (a full disk, an I/O error)."""


class _Lines:
    """The lines of one input as they arrive: each read takes what the file, pipe or terminal has (at most _READ
    bytes, never waiting for more), split at newlines (a trailing \\r dropped). `number`: the lines taken so far."""

    def __init__(self, name: str, fd: int | None = None, stream: BinaryIO | None = None, owned: bool = False):
        self.name, self._fd, self._stream, self._owned = name, fd, stream, owned
        self._whole: collections.deque[bytes] = collections.deque()
        self._partial, self._ended, self._too_long, self.number = b"", False, False, 0

    def next(self) -> bytes | None:
        """The next line without its newline, or None at the end of the input."""
        while not self._whole and not self._ended:
            if self._too_long:
                raise InputError(f"{self.name}:{self.number + 1}: a line of more than {MAX_LINE_BYTES:,} bytes (is "
                                 f"it text, one sentence per line?)")
            self._fill()
        if not self._whole:
            return None
        self.number += 1
        return self._whole.popleft().removesuffix(b"\r")

    def ready(self) -> bool:
        """Whether the next line (or the end) can be had without waiting for the writer of the input."""
        if self._whole or self._ended or self._fd is None:
            return True
        return bool(select.select([self._fd], [], [], 0)[0])

    def _fill(self) -> None:
        try:
            piece = os.read(self._fd, _READ) if self._fd is not None else self._stream.read(_READ)
        except OSError as error:
            raise InputError(f"{self.name}: cannot read ({(error.strerror or str(error)).lower()})") from None
        if not piece:
            self._ended = True
            if self._partial:
                self._whole.append(self._partial)
            return
        *whole, self._partial = (self._partial + piece).split(b"\n")
        self._whole.extend(whole)
        self._too_long = len(self._partial) > MAX_LINE_BYTES  # refused once the lines before it are taken

    def close(self) -> None:
        if self._owned:
            os.close(self._fd)


def _open(path: str, stdin: BinaryIO | None) -> _Lines:
    if path == "-":
        return _Lines("<stdin>", stream=stdin) if stdin is not None else _Lines("<stdin>", fd=0)
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory")
        return _Lines(path, fd=os.open(path, os.O_RDONLY), owned=True)
    except OSError as error:
        raise InputError(f"{path}: cannot read ({(error.strerror or str(error)).lower()})") from None


def read_chunks(paths: Sequence[str], encoding: str = "utf-8", stdin: BinaryIO | None = None,
                max_words: int | None = None, max_lines: int = CHUNK_LINES,
                max_bytes: int = CHUNK_BYTES) -> Iterator[list[str]]:
    """The lines of the inputs, in order, as lists of at most max_lines lines / max_bytes bytes; a list ends early
    where its input has nothing more ready, and at the end of each input. Every file is opened first (a missing
    one is named before any output). A line of more than `max_words` words is refused (`tag` keeps every word of a
    line, so it bounds the line instead of cutting it)."""
    inputs = []
    try:
        for path in paths or ["-"]:
            inputs.append(_open(path, stdin))
        for source in inputs:
            chunk, size = [], 0
            try:
                while (raw := source.next()) is not None:
                    chunk.append(_decoded(raw, source, encoding, max_words))
                    size += len(raw)
                    if len(chunk) >= max_lines or size >= max_bytes or not source.ready():
                        yield chunk
                        chunk, size = [], 0
            except InputError:
                if chunk:
                    yield chunk  # the lines before the one refused are answered
                raise
            if chunk:
                yield chunk
    finally:
        for source in inputs:
            source.close()


def _decoded(raw: bytes, source: _Lines, encoding: str, max_words: int | None) -> str:
    number = source.number
    try:
        line = raw.decode(encoding)
    except UnicodeDecodeError as error:
        raise InputError(f"{source.name}:{number}: not valid {encoding} text ({error.reason} at byte {error.start}); "
                         f"give --encoding") from None
    line = line.removeprefix(BOM) if number == 1 else line
    if max_words is not None and len(raw) > max_words and len(line.split()) > max_words:
        raise InputError(f"{source.name}:{number}: {len(line.split()):,} words, more than the {max_words} a line may "
                         f"have; split long lines into sentences")
    return line


class TextOutput:
    """Where the answers go, chunk by chunk: stdout, flushed after each chunk, or --output FILE, written beside it and
    put in its place whole when the command succeeds (a failure leaves the previous file; a symbolic link's target
    is the file; the file keeps its permissions, a new one gets the umask's). --output that is a stream (a FIFO, a
    device: /dev/stdout) is written as it goes, never replaced: a file renamed over it replaced /dev/full itself.
    conll: each chunk is a list of CoNLL blocks (each ending in a newline), separated by a blank line. A write that
    fails names stdout or the file; a closed stdout pipe raises ReaderGone."""

    def __init__(self, path: str | None = None, conll: bool = False):
        self.path, self.conll = path, conll
        self._file, self._temporary, self._place, self._blocks = None, None, None, 0
        if path is not None and os.path.isdir(path):
            raise InputError(f"--output {path}: is a directory, not a file")

    def __enter__(self) -> "TextOutput":
        if self.path is None:
            return self
        try:
            if os.path.exists(self.path) and not stat.S_ISREG(os.stat(self.path).st_mode):
                self._file = open(self.path, "wb")  # a stream: written in place
                return self
            place = os.path.realpath(self.path)
            handle, self._temporary = tempfile.mkstemp(prefix=os.path.basename(place) + ".", suffix=".tmp",
                                                       dir=os.path.dirname(place))
            os.fchmod(handle, _mode_for(place))
        except OSError as error:
            raise describe_write_error(self.path, error) from None
        self._file, self._place = os.fdopen(handle, "wb"), place
        return self

    def write(self, lines: Sequence[str]) -> None:
        if self.conll:
            text = "".join(("\n" if self._blocks + i else "") + block for i, block in enumerate(lines))
            self._blocks += len(lines)
        else:
            text = "".join(line + "\n" for line in lines)
        if self._file is not None:
            try:
                self._file.write(text.encode("utf-8"))
                self._file.flush()
            except OSError as error:
                raise describe_write_error(self.path, error) from None
        else:
            _to_stdout(text)

    def __exit__(self, kind, error, trace) -> None:
        if self._file is None:
            return
        try:
            if kind is None and self._temporary is not None:
                os.fsync(self._file.fileno())
                self._file.close()
                os.replace(self._temporary, self._place)
                self._temporary = None
        except OSError as failed:
            raise describe_write_error(self.path, failed) from None
        finally:
            try:
                self._file.close()  # what a failed write left in its buffer fails again here: that error was named
            except OSError as failed:
                if kind is None:
                    raise describe_write_error(self.path, failed) from None
            if self._temporary is not None and os.path.exists(self._temporary):
                os.unlink(self._temporary)


def _mode_for(place: str) -> int:
    """The permissions of the file that --output replaces, or those open() gives a new one under the umask (mkstemp
    makes its files 0600: the answers were private whatever the umask, and a replaced file lost its mode)."""
    try:
        return stat.S_IMODE(os.stat(place).st_mode)
    except FileNotFoundError:
        mask = os.umask(0o077)
        os.umask(mask)
        return 0o666 & ~mask


def _to_stdout(text: str) -> None:
    """Write and flush to the process's stdout, under any wrapper that would hide a closed pipe (the answers are the
    product here: a closed pipe ends the command, a full disk is an error naming stdout)."""
    stream = sys.stdout.buffer
    try:
        stream.write(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
        stream.flush()
    except BrokenPipeError:
        _drop_stdout()
        raise ReaderGone() from None
    except OSError as error:
        _drop_stdout()
        raise OutputError(f"stdout: cannot write ({(error.strerror or str(error)).lower()})") from None


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered goes nowhere instead of failing again at exit."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)
