"""Length buckets: the one rule by which a batch's time dimensions are padded, so that an epoch's batches fall into
a few fixed shapes (what a CUDA graph or a compiled step needs: one per shape), and which buckets a training run's
batches get.

A length n is padded up to the smallest edge that holds it (past the last edge, or without edges, it keeps its own
length), then up to a multiple of ``multiple``. A batcher (data/batching.py) pads each batch's time dimensions this way
when it builds it (POS: T; NMT: S and T, each on its own), and reads the same padded lengths from its offsets alone
when asked for its batches' shapes (data/batch_set.py's ``BatchSet.batch_shapes``), without building a batch.

The policy (``training_buckets``): workers whose batch shapes must repeat (hogwild.Config.graphs, --compile: the
task's ``fixed_shapes``) train on POS_EDGES (POS: Brown's sentences are 1-180 words, 95% within 48; a longer one keeps
its own length, an eager step) or on NMT edges every NMT_STEP positions up to ``max_len`` + 2 (bos and eos; source and
target each, a few (S, T) shapes per batch size); NMT's --length-bucket N is the multiple.

Usage: ``buckets = LengthBuckets((8, 16, 24))``; ``buckets.length(10)`` -> 16; ``buckets.lengths(np.array([3, 30]))``
-> [8, 30]; ``batcher.with_buckets(training_buckets("nmt", True, max_len=50))``.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

POS_EDGES = (8, 16, 24, 32, 48, 64, 96, 128)
NMT_STEP = 8


@dataclass(frozen=True)
class LengthBuckets:
    """Pad a length up to the smallest of ``edges`` that holds it, then up to a multiple of ``multiple``."""

    edges: tuple[int, ...] = ()
    multiple: int = 1

    def __post_init__(self):
        edges = tuple(int(edge) for edge in self.edges)
        if edges and (edges[0] < 1 or any(a >= b for a, b in zip(edges, edges[1:]))):
            raise ValueError(f"bucket edges must be increasing lengths >= 1, got {edges}")
        if self.multiple < 1:
            raise ValueError(f"multiple must be >= 1, got {self.multiple}")
        object.__setattr__(self, "edges", edges)

    def length(self, n: int) -> int:
        """The padded length of one length n (a batch's longest)."""
        if self.edges and n <= self.edges[-1]:
            n = self.edges[bisect.bisect_left(self.edges, n)]
        return -(-n // self.multiple) * self.multiple

    def lengths(self, n: np.ndarray) -> np.ndarray:
        """``length`` of each of the lengths ``n`` (an integer array of any shape)."""
        n = np.asarray(n, dtype=np.int64)
        if self.edges:
            edges = np.asarray(self.edges, dtype=np.int64)
            at = np.searchsorted(edges, n)  # the first edge >= n
            n = np.where(at < len(edges), edges[np.minimum(at, len(edges) - 1)], n)
        return -(-n // self.multiple) * self.multiple


def training_buckets(task: str, fixed_shapes: bool, max_len: int = 0, multiple: int = 1) -> LengthBuckets | None:
    """The buckets of a run's training batches (above): with ``fixed_shapes`` the task's edges, and NMT's
    ``multiple`` (--length-bucket); None when they pad nothing."""
    edges: tuple[int, ...] = ()
    if fixed_shapes:
        edges = POS_EDGES if task == "pos" else tuple(range(NMT_STEP, max_len + 2 + NMT_STEP, NMT_STEP))
    return LengthBuckets(edges, multiple) if edges or multiple > 1 else None
