"""Id arrays on disk: .npy files mapped read-only (pages read when touched, shared by every process that maps them),
pickled as their file name so that a worker maps the same file instead of receiving a copy, written chunk by chunk,
and the smallest dtype that holds a vocabulary's ids.

Usage: ``ids = open_array(folder / "train.src.npy")``; ``state = array_state(ids)`` in the parent,
``array_from_state(state)`` in a worker; ``with NpyWriter(path, id_dtype(len(vocab)), count) as out: out.write(ids)``;
``with RawWriter(path, np.int32) as out: out.write(ids)`` then ``read_raw(path, np.int32, start, stop)``;
``scan = scan_array(ids)``: its file's CRC-32 and its values' range and order, read once without mapping it.
"""
from __future__ import annotations

import mmap
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


def id_dtype(size: int) -> np.dtype:
    """The smallest dtype for ids 0 .. size-1 (fairseq's binarized datasets choose so too): uint16 up to 65,536
    symbols, else int32. Batches are built as int64 whatever the stored dtype."""
    return np.dtype(np.uint16) if size <= 2**16 else np.dtype(np.int32)


def open_array(path: str | os.PathLike) -> np.ndarray:
    """A .npy file as a read-only memory map: nothing is read until a page is touched."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` is a whole file mapped by numpy (not a view or slice of one, not memory of its own)."""
    return isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap)


@dataclass(frozen=True)
class MappedFile:
    """How a worker maps the same array again: the file, where the data starts, its dtype and shape."""
    path: str
    offset: int
    dtype: str
    shape: tuple[int, ...]


def array_state(array: np.ndarray) -> MappedFile | torch.Tensor:
    """What to pickle for an array: a mapped file's name, else the array as a tensor (hogwild's batch store packs
    tensors into one file the workers map, so a worker gets a view, not a copy)."""
    if is_mapped(array):
        return MappedFile(str(array.filename), int(array.offset), array.dtype.str, tuple(array.shape))
    array = np.ascontiguousarray(array)
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def array_from_state(state: MappedFile | torch.Tensor) -> np.ndarray:
    """The array of `array_state`: the file mapped again (read-only), or the tensor's memory as an array."""
    if isinstance(state, MappedFile):
        return np.memmap(state.path, np.dtype(state.dtype), "r", state.offset, state.shape)
    return state.numpy()


@dataclass(frozen=True)
class ArrayScan:
    """One read of an array's file: what a cache entry is checked by before it is trusted (data/cache.py)."""
    crc32: int         # of the whole file, header included
    low: int | None    # the smallest value (None: no values)
    high: int | None   # the largest value
    ordered: bool      # no value is smaller than the one before it (in file order)
    first: int | None  # the first and last values
    last: int | None


SCAN_BYTES = 1 << 22  # bytes read at a time: a multiple of every itemsize


def scan_array(array: np.ndarray) -> ArrayScan:
    """Read a mapped array's file once with plain reads (none of its pages is mapped into this process, so a check
    of a large entry adds nothing to its resident memory), a block of SCAN_BYTES at a time."""
    crc, low, high, ordered, first, last = 0, None, None, True, None, None
    with open(array.filename, "rb", buffering=0) as file:
        crc = zlib.crc32(file.read(array.offset))
        block = bytearray(SCAN_BYTES)
        while size := file.readinto(block):
            crc = zlib.crc32(memoryview(block)[:size], crc)
            values = np.frombuffer(block, dtype=array.dtype, count=size // array.dtype.itemsize)
            if not len(values):
                continue
            low = int(values.min()) if low is None else min(low, int(values.min()))
            high = int(values.max()) if high is None else max(high, int(values.max()))
            ordered = ordered and (last is None or values[0] >= last) and bool(np.all(values[1:] >= values[:-1]))
            first = int(values[0]) if first is None else first
            last = int(values[-1])
    return ArrayScan(crc, low, high, ordered, first, last)


class NpyWriter:
    """A 1-D .npy file of a known length written chunk by chunk (the header first), so that no more than a chunk is
    ever in memory. Closing it checks that exactly `length` values were written."""

    def __init__(self, path: str | os.PathLike, dtype: np.dtype, length: int):
        self.path, self.dtype, self.length, self.written = Path(path), np.dtype(dtype), length, 0
        self.file = open(self.path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (length,)}
        np.lib.format.write_array_header_1_0(self.file, header)

    def write(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.written += len(values)

    def close(self) -> None:
        self.file.close()
        if self.written != self.length:
            raise ValueError(f"{self.path}: {self.written} values written, {self.length} announced")

    def __enter__(self) -> "NpyWriter":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.file.close()


class RawWriter:
    """Values appended to a headerless file, for arrays whose length is known only at the end; read back a range at
    a time with read_raw (plain reads: the file's pages are not mapped into the reader)."""

    def __init__(self, path: str | os.PathLike, dtype: np.dtype):
        self.path, self.dtype, self.written = Path(path), np.dtype(dtype), 0
        self.file = open(self.path, "wb")

    def write(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.written += len(values)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> "RawWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_raw(path: str | os.PathLike, dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    """Values start .. stop-1 of a RawWriter file."""
    dtype = np.dtype(dtype)
    return np.fromfile(path, dtype=dtype, count=stop - start, offset=start * dtype.itemsize)
