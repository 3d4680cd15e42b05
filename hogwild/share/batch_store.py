"""The batches, written once by the parent and memory-mapped by every worker (one copy in the page cache).

Passing a list of thousands of tensors to spawned workers would open a shared-memory file descriptor per tensor per
process. Instead every tensor of every batch is packed into one flat tensor per dtype (`batches.pt`, mapped with
torch.load(mmap=True)), and the batches' structure (lists, dicts, tuples, numbers, strings) is pickled apart
(`batches.pkl`) with each tensor as (dtype, offset, shape, stride) into those flat tensors: loading makes each tensor
a view, no copy. torch.save of the batches themselves took 8.4 s to write and 9.9 s to load in each worker for
Brown's 51k batches (258k small tensors, 249 MB), most of a run's start-up; packed, 3.2 s to write and 1.0 s to
load (2026-11-25, the 2-core VM).

Each tensor's storage is packed once, whole, as torch.save does: views of one tensor (overlapping windows of a
corpus) share memory again after loading, with their strides; a small view of a large tensor carries the large
storage along, so give the batches their own tensors (as the data pipeline does) when that matters.

Tensors that cannot be viewed this way (sparse, on a GPU, requiring grad, subclasses such as Parameter) are pickled
as pickle does by default.

A map-style `torch.utils.data.Dataset` (a `__getitem__` and a `__len__`) is stored as the object itself, not as the
list of its items, as DataLoader sends a dataset to its workers: each worker unpickles it and indexes it, so it builds
its own batches (its tensors are packed like the batches' tensors). A dataset larger than memory keeps its data in
files it maps itself (data/batch_set.py's BatchSet: the cache's token arrays), so that the store holds only what
its pickle holds.

Serves step 3 of `hogwild.train` (spawn): the engine writes the store before spawning; each worker maps it.

Usage: `store = BatchStore(batches, directory)` in the parent; `batches = store.load()` in a worker (indexed:
`batches[i]`); `store.remove()`.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from typing import Any

import torch
from torch._utils import _flatten_dense_tensors
from torch.utils.data import Dataset  # one C++ call for 258k tensors (DDP's bucketing uses it)


def _packed(key: str, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """What a packed tensor refers to in the pickle; BatchStore.load's unpickler puts a view of its file here."""
    raise RuntimeError("packed batch tensors are loaded through BatchStore.load")


def _viewable(tensor: Any) -> bool:
    return (type(tensor) is torch.Tensor and tensor.layout == torch.strided and tensor.device.type == "cpu"
            and not tensor.requires_grad and not tensor.is_quantized and not tensor.is_conj() and not tensor.is_neg())


class _Packer(pickle.Pickler):
    """Pickles the batches' structure; the storage of each plain CPU tensor goes into `chunks` (dtype -> flat
    tensors) instead, once per storage, and the tensor becomes its offset, shape and stride there: tensors that
    share memory (views, overlapping windows) share it again after loading, as with torch.save."""

    def __init__(self, file):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.chunks: dict[str, list[torch.Tensor]] = {}
        self.sizes: dict[str, int] = {}
        self.bases: dict[tuple[int, int, torch.dtype], int] = {}  # (storage address, bytes, dtype) -> its offset

    def reducer_override(self, obj):  # called for objects other than plain ints, strs, lists, dicts, ...
        if not _viewable(obj):
            return NotImplemented
        storage = obj.untyped_storage()
        if storage.nbytes() % obj.element_size():  # a storage that is not whole elements of this dtype
            obj = obj.clone()
            storage = obj.untyped_storage()
        key = str(obj.dtype).removeprefix("torch.")
        identity = (storage.data_ptr(), storage.nbytes(), obj.dtype)
        if identity not in self.bases:
            elements = storage.nbytes() // obj.element_size()
            whole = obj if obj.numel() == elements and obj.is_contiguous() else \
                obj.new_empty(0).set_(storage, 0, (elements,), (1,))  # (the common case, a tensor of its own, as is)
            self.bases[identity] = self.sizes.get(key, 0)
            self.chunks.setdefault(key, []).append(whole)
            self.sizes[key] = self.bases[identity] + elements
        return _packed, (key, self.bases[identity] + obj.storage_offset(), tuple(obj.shape), obj.stride())

    def flat(self) -> dict[str, torch.Tensor]:
        """dtype -> every packed storage of that dtype, flattened and concatenated in packing order."""
        return {key: _flatten_dense_tensors(chunks) for key, chunks in self.chunks.items()}


class _Unpacker(pickle.Unpickler):
    def __init__(self, file, flat: dict[str, torch.Tensor]):
        super().__init__(file)
        self.flat = flat

    def find_class(self, module: str, name: str):
        if module == __name__ and name == "_packed":
            return lambda key, offset, shape, stride: self.flat[key].as_strided(shape, stride, offset)
        return super().find_class(module, name)


def opens_in_worker(batches: Any) -> bool:
    """Whether the batches are a torch Dataset, stored and sent to each worker as the object itself."""
    return isinstance(batches, Dataset)


class BatchStore:
    """The batches in two files under `directory`: one flat tensor per dtype, and the pickled structure (the list
    of batches, or a Dataset itself)."""

    def __init__(self, batches: Sequence, directory: str):
        self.path = os.path.join(directory, "batches.pt")
        self.structure = os.path.join(directory, "batches.pkl")
        self.length = len(batches)
        dataset = opens_in_worker(batches)
        with open(self.structure, "wb") as file:
            packer = _Packer(file)
            try:
                packer.dump(batches if dataset else list(batches))
            except (pickle.PicklingError, AttributeError, TypeError) as error:  # "Can't pickle local object ..."
                what = f"the {type(batches).__name__} Dataset to the workers (each gets it pickled, as DataLoader's " \
                    f"workers do)" if dataset else "the batches to the workers (they are pickled into the batch store)"
                raise TypeError(f"cannot send {what}: {error}. Keep lambdas, local functions and classes, open files "
                                f"and locks out of them (define them at module level, or open them in __setstate__)") \
                    from error
        torch.save(packer.flat(), self.path)

    def load(self) -> Sequence:
        flat = torch.load(self.path, mmap=True, weights_only=True)
        with open(self.structure, "rb") as file:
            return _Unpacker(file, flat).load()

    def remove(self) -> None:
        """Unlink the files; workers that already loaded them keep their mapping."""
        for path in (self.path, self.structure):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
