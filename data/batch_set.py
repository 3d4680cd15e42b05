"""A batcher's training batches as a map-style torch Dataset that each worker indexes itself: what a task hands
``hogwild.train`` instead of a list of batch dicts, so that no batch is built, pickled or copied in the parent.

``BatchSet(batcher)[i] == batcher.batches()[i]``, built when asked for from the batcher's arrays (padded by the
batcher's length buckets: data/buckets.py). Pickled, it carries the batcher's settings, its arrays by file name when
they are memory maps (data/mapped.py: the cache's arrays; a worker maps the same file) and the plan as two index
tensors (hogwild's batch store packs them into the one file every worker maps), so its pickle is small whatever the
corpus size. The engine sends any ``torch.utils.data.Dataset`` to the workers as the object itself
(hogwild/share/batch_store.py), as DataLoader does.

``batch_shapes()`` tells the shapes of its batches and how many batches have each, read from the batcher's offsets
and plan (fairseq's bucketing reads a sizes array the same way) without building a batch: a device worker asks it
for the shapes it captures and the size of its sparse-row buffers (hogwild/worker/step_graph.py; docs/library.md
names this protocol for any Dataset).

Usage: ``batches = BatchSet(dataset.train.with_buckets(LengthBuckets(multiple=8)))``; ``len(batches)``;
``batches[0]`` -> a batch dict; ``batches[1::2]`` -> a BatchSet of every other batch; ``batches.batch_shapes()``.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


class BatchSet(Dataset):
    """The batches of ``batcher`` in plan order (data/batching.py), each built on demand."""

    def __init__(self, batcher: Any):
        order, starts = batcher.flat_plan()
        self.batcher = batcher
        index = np.int32 if len(order) < 2**31 else np.int64  # 4 bytes a pair: held by the parent, mapped by workers
        self.order = torch.from_numpy(np.ascontiguousarray(order, dtype=index))       # (N,) examples in plan order
        self.starts = torch.from_numpy(np.ascontiguousarray(starts, dtype=np.int64))  # (B,) batch i's first in order

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int | slice) -> dict[str, Any] | "BatchSet":
        if isinstance(index, slice):
            part = object.__new__(BatchSet)
            part.__dict__.update(self.__dict__, starts=self.starts[index])
            return part
        if not -len(self) <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        start = int(self.starts[int(index) % len(self)])
        return self.batcher.batch(self.order[start:start + self.batcher.batch_size].numpy())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def batch_shapes(self) -> list[tuple[int, int, dict[str, torch.Tensor]]]:
        """(index of the first batch of a shape, batches of that shape, a batch of that shape whose tensors are on
        the meta device) for each shape of these batches, in order of first appearance; built from the batcher's
        offsets (``padded_sizes``), no batch built."""
        sizes = self.batcher.padded_sizes(self.order.numpy(), self.starts.numpy())  # (B, 1 + k): rows, lengths
        _, first, counts = np.unique(_row_keys(sizes), return_index=True, return_counts=True)
        ranked = np.argsort(first)
        return [(int(first[i]), int(counts[i]), self.batcher.layout(*map(int, sizes[first[i]]))) for i in ranked]


def _row_keys(sizes: np.ndarray) -> np.ndarray:
    """(B,) int64, equal where the rows of ``sizes`` (B, C) of non-negative integers are: one number per row, so that
    np.unique sorts integers (a million rows in about 0.1 s; unique rows of a 2-D array sort far slower)."""
    ranges = [int(column.max()) + 1 for column in sizes.T]
    if math.prod(ranges) >= 2**63:  # past int64 (not for lengths and rows of real batches): the slow way
        return np.unique(sizes, axis=0, return_inverse=True)[1].reshape(-1)
    keys = np.zeros(len(sizes), dtype=np.int64)
    for column, size in zip(sizes.T, ranges):
        keys = keys * size + column
    return keys
