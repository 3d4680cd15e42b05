"""Reading text files: transparent .gz/.xz/.bz2, a chosen encoding, errors that name the file and line.

Usage: ``for number, line in numbered_lines("brown/ca01.xz"): ...`` (``line`` without its newline).
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
from pathlib import Path
from typing import IO, Container, Iterator

from .errors import CorpusError

COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2")
_OPENERS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
_MAGIC = ((b"\x1f\x8b", ".gz"), (b"\xfd7zXZ\x00", ".xz"), (b"BZh", ".bz2"))
BOM = "\ufeff"  # the byte-order mark as decoded text (utf-8's EF BB BF)


def strip_compression(name: str) -> str:
    """``train.en.xz`` -> ``train.en``: the file name the data format is judged by."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a possibly compressed file for reading bytes; compression is judged by suffix, then by magic bytes."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError("file not found" if not path.exists() else "not a regular file", path=path)
    opener = _OPENERS.get(path.suffix)
    if opener is None:
        with open(path, "rb") as probe:
            head = probe.read(6)
        opener = next((_OPENERS[s] for magic, s in _MAGIC if head.startswith(magic)), open)
    return opener(path, "rb")


def numbered_lines(path: str | os.PathLike, encoding: str = "utf-8",
                   only: Container[int] | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line (1-based, trailing newline and \\r removed, and a byte-order mark
    at the start of the file: editors on Windows write one, and it would otherwise become part of the first word).
    ``only``: just the lines with these numbers (the others are not decoded).

    Undecodable bytes raise :class:`CorpusError` naming the file and line instead of a bare UnicodeDecodeError;
    a corrupt compressed stream raises it naming the file.
    """
    number = 0
    try:
        with open_binary(path) as handle:
            for number, raw in enumerate(handle, start=1):
                if only is not None and number not in only:
                    continue
                try:
                    text = raw.decode(encoding)
                except UnicodeDecodeError as error:
                    raise CorpusError(f"cannot decode byte {raw[error.start:error.start + 1]!r} at column "
                                      f"{error.start + 1} as {encoding}", path=path, line=number) from None
                if number == 1:
                    text = text.removeprefix(BOM)
                yield number, text.rstrip("\r\n")
    except (OSError, EOFError, lzma.LZMAError) as error:
        if isinstance(error, FileNotFoundError):
            raise CorpusError("file not found", path=path) from None
        raise CorpusError(f"cannot read ({error})", path=path, line=number + 1 if number else None) from None


def read_lines(path: str | os.PathLike, encoding: str = "utf-8") -> list[str]:
    """All lines of a (possibly compressed) text file, newlines removed."""
    return [text for _, text in numbered_lines(path, encoding)]


def find_compressed(path: str | os.PathLike) -> Path:
    """``train.fr`` -> the first of ``train.fr``, ``train.fr.gz``, ``train.fr.xz``, ``train.fr.bz2`` that exists."""
    path = Path(path)
    for candidate in [path] + [path.with_name(path.name + s) for s in COMPRESSED_SUFFIXES]:
        if candidate.is_file():
            return candidate
    raise CorpusError(f"file not found (also tried {', '.join(COMPRESSED_SUFFIXES)})", path=path)
