"""Batch feed: which batch each worker trains on next, exactly once per epoch, in a seeded order.

Batches never travel through the queue: every worker maps the same batch store (batch_store.py), and the
parent's producer thread only sends tickets `(seq, epoch, index)` through a bounded queue, up to 32 consecutive
tickets per queue item on larger data (each item wakes the parent's feeder thread: a cost worth amortising), so a
step costs a fraction of one small pickle instead of shared-memory handles for every tensor.
`seq = epoch * n + position` numbers tickets in feed order; a checkpoint stores the first sequence number not yet
trained (`CounterSnapshot.resume_seq`, run_state.py) and a resumed run continues from exactly there with the same
order. In 'partition' mode each worker walks its own fixed shard (`indices[w::W]`, reshuffled within the shard every
epoch) and no queue is used.

Serves step 3 of `hogwild.train` (spawn): the feed is built before spawning, its producer started in step 4.

Usage: `feed = BatchFeed(ctx, n_batches=100, workers=2, epochs=3, seed=0, shuffle=True, depth=16); feed.start(stop)`
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch


Ticket = tuple[int, int, int]  # (seq, epoch, batch index)
_POLL = 0.2  # seconds between stop checks while waiting on the queue
_MAX_CHUNK = 32  # most tickets per queue item (each put wakes the parent's feeder thread: ~150 us of its CPU)


def tickets_per_item(n_batches: int, workers: int) -> int:
    """1 on small data (tests, short epochs stay balanced); up to 32 when every worker gets >= 8 items an epoch."""
    return max(1, min(_MAX_CHUNK, n_batches // (8 * workers)))


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Batch indices of one epoch: the same for every process and every resume. (n,) int64"""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator).numpy()


def partition_order(n: int, workers: int, worker: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Worker `worker`'s fixed shard `range(worker, n, workers)`, in this epoch's seeded order."""
    shard = np.arange(worker, n, workers, dtype=np.int64)
    if not shuffle:
        return shard
    generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 1_009 + worker)
    return shard[torch.randperm(len(shard), generator=generator).numpy()]


def as_sequence(batches: Sequence | Iterable) -> Sequence:
    """Indexable batches: a Sequence as is; any other re-iterable is read once into a list."""
    if isinstance(batches, Sequence) or (hasattr(batches, "__getitem__") and hasattr(batches, "__len__")):
        sequence = batches
    elif isinstance(batches, Iterable):
        sequence = list(batches)
    else:
        raise TypeError(f"batches must be a sequence or re-iterable of batches, got {type(batches).__name__}")
    if len(sequence) == 0:
        raise ValueError("batches is empty: nothing to train on")
    return sequence


class BatchFeed:
    """Parent side of 'queue' mode: a producer thread puts lists of consecutive tickets into a bounded queue,
    then one None per worker."""

    def __init__(self, ctx: Any, n_batches: int, workers: int, epochs: int | None, seed: int, shuffle: bool,
                 depth: int, start_seq: int = 0):
        self.queue = ctx.Queue(maxsize=depth)
        self.n, self.workers, self.epochs = n_batches, workers, epochs
        self.seed, self.shuffle, self.start_seq = seed, shuffle, start_seq
        self.chunk = tickets_per_item(n_batches, workers)
        self._thread: threading.Thread | None = None

    def start(self, stopped: Callable[[], bool]) -> None:
        self._thread = threading.Thread(target=self._produce, args=(stopped,), name="hogwild-feed", daemon=True)
        self._thread.start()

    def _produce(self, stopped: Callable[[], bool]) -> None:
        epoch, position = divmod(self.start_seq, self.n)
        while self.epochs is None or epoch < self.epochs:
            order = epoch_order(self.n, self.seed, epoch, self.shuffle)
            for first in range(position, self.n, self.chunk):
                positions = range(first, min(first + self.chunk, self.n))
                chunk = [(epoch * self.n + p, epoch, int(order[p])) for p in positions]
                if not self._put(chunk, stopped):
                    return
            epoch, position = epoch + 1, 0
        for _ in range(self.workers):
            if not self._put(None, stopped):
                return

    def _put(self, item: list[Ticket] | None, stopped: Callable[[], bool]) -> bool:
        while not stopped():
            try:
                self.queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=2 * _POLL + 1)
        self.queue.cancel_join_thread()  # never block exit on tickets nobody will read
        self.queue.close()


class QueueReader:
    """Worker side of 'queue' mode. next() -> (epoch, index), or None at the end of the data or on stop.

    Tickets received but not started stay 'in progress' for the checkpoint's data position (the counters'
    IN_PROGRESS holds the first of them), so stopping between them loses none."""

    def __init__(self, tickets: Any, stopped: Callable[[], bool], view: Any):
        self.tickets, self.stopped, self.view = tickets, stopped, view
        self.pending: list[Ticket] = []  # received, not yet started, in feed order

    def next(self) -> tuple[int, int] | None:
        while not self.pending and not self.stopped():
            try:
                chunk = self.tickets.get(timeout=_POLL)
            except queue.Empty:
                continue
            if chunk is None:
                return None
            self.view.received(chunk[0][0], chunk[-1][0])
            self.pending = chunk[::-1]  # pop() from the end takes them in feed order
        if not self.pending or self.stopped():
            return None
        seq, epoch, index = self.pending.pop()
        self.view.take(seq)
        return epoch, index

    def done(self) -> None:
        self.view.finished(pending=self.pending[-1][0] if self.pending else -1)


class PartitionReader:
    """Worker side of 'partition' mode: its own shard, epoch after epoch, resuming at its saved position."""

    def __init__(self, n: int, workers: int, worker: int, epochs: int | None, seed: int, shuffle: bool,
                 stopped: Callable[[], bool], view: Any, epoch: int = 0, position: int = 0):
        self.n, self.workers, self.worker, self.epochs = n, workers, worker, epochs
        self.seed, self.shuffle, self.stopped, self.view = seed, shuffle, stopped, view
        self.epoch, self.position = epoch, position
        self.order = partition_order(n, workers, worker, seed, epoch, shuffle)
        if len(self.order) == 0:
            raise ValueError(f"partition mode: {n} batches cannot give each of {workers} workers a shard")

    def next(self) -> tuple[int, int] | None:
        if self.position >= len(self.order):
            self.epoch, self.position = self.epoch + 1, 0
            self.order = partition_order(self.n, self.workers, self.worker, self.seed, self.epoch, self.shuffle)
        if self.stopped() or (self.epochs is not None and self.epoch >= self.epochs):
            return None
        index = int(self.order[self.position])
        self.view.take(self.epoch * self.n + index)
        return self.epoch, index

    def done(self) -> None:
        self.position += 1
        self.view.finished(self.epoch, self.position)
