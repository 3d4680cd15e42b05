"""Batch feed: which batch each worker trains on next, exactly once per epoch, in a seeded order.

Batches never travel through a queue: every worker maps the same batch store (batch_store.py), and the parent's
dealer thread only sends tickets `(seq, epoch, index)`, up to 32 consecutive tickets per queue item on larger data
(each item wakes the parent's feeder thread: a cost worth amortising), so a step costs a fraction of one small
pickle instead of shared-memory handles for every tensor. `seq = epoch * n + position` numbers tickets in feed order.

Each worker has a queue of its own (its `Mailbox`), a few items deep: a worker killed while it reads (a
multiprocessing queue's reader holds a lock and may leave half a message) breaks only its own queue, which the
dealer replaces for the worker that takes its place (`reassign`). The dealer knows every ticket it dealt to each
worker, and a worker counts a batch done with one store as its step ends (`SharedCounters.tickets_done`), in the
order received: what a dead worker had not counted - in its queue, received, being trained, its update half
applied - is dealt again first, so none is lost and each is counted once (a batch may be trained twice). The same
bookkeeping makes max_steps exact: the dealer deals only as many tickets as updates are left (a skipped,
non-finite update frees its ticket's slot), and ends every worker when all are applied; and it gives the checkpoint
its data position, the first ticket not known to be done (`resume_seq`): a resumed run continues from exactly there
with the same order. In 'partition' mode each worker walks its own fixed shard (`indices[w::W]`, reshuffled within
the shard every epoch) and no queue is used.

A streamed run's tickets bring their batch (share/stream.py's StreamFeed deals them): QueueReader keeps it for the
worker's step to take (`take_arrived`).

Serves step 3 of `hogwild.train` (spawn): the feed is built before spawning, its dealer started in step 4.

Usage: `feed = BatchFeed(ctx, 100, workers=2, epochs=3, seed=0, shuffle=True, depth=16, counters=counters)`;
`feed.start(stop)`; worker w reads `QueueReader(feed.mailbox(w), stop, view)`; `feed.reassign(w)` after it died.
"""
from __future__ import annotations

import queue
import threading
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


Ticket = tuple[int, int, int]  # (seq, epoch, batch index)
_POLL = 0.2  # seconds between stop checks while waiting on the queue
_BUDGET_POLL = 0.005  # seconds between the dealer's checks while the last updates of max_steps are in flight
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


def as_sequence(batches: Sequence) -> Sequence:
    """Indexable batches (share/stream.py's `is_streamed` is False), checked not to be empty."""
    if len(batches) == 0:
        raise ValueError("batches is empty: nothing to train on")
    return batches


@dataclass
class Mailbox:
    """One worker's tickets: its own queue, and the feed's `room` semaphore, which the worker posts after each item it
    takes so that the dealer wakes (a post is one atomic operation: a killed worker leaves no lock held)."""

    queue: Any
    room: Any


class BatchFeed:
    """Parent side of 'queue' mode: a dealer thread fills each worker's queue with lists of consecutive tickets, then
    None when nothing is left for it. `counters` (run_state.SharedCounters) tell which dealt tickets are done."""

    def __init__(self, ctx: Any, n_batches: int, workers: int, epochs: int | None, seed: int, shuffle: bool,
                 depth: int, counters: Any, start_seq: int = 0, max_steps: int | None = None):
        self.ctx, self.n, self.workers, self.epochs = ctx, n_batches, workers, epochs
        self.seed, self.shuffle, self.start_seq, self.counters = seed, shuffle, start_seq, counters
        self.chunk = tickets_per_item(n_batches, workers)
        self.depth = max(2, -(-depth // workers))  # items per worker: about `depth` in all
        # tickets one worker may hold (queued or training) before it is dealt more, so that at the end of the data or
        # of max_steps no worker is left with a long tail while the others idle (one worker: nothing to balance)
        self.hold = 2 * self.chunk if workers > 1 else None
        self.room = ctx.Semaphore(0)
        self.queues = [ctx.Queue(maxsize=self.depth) for _ in range(workers)]
        self._lock = threading.Lock()  # the dealer thread and the parent's loop (reassign, resume_seq)
        self._epoch, self._position = divmod(start_seq, n_batches)
        self._order = self._epoch_order()
        self._returned: deque[Ticket] = deque()  # tickets of a dead worker, dealt again first
        self._held = [deque() for _ in range(workers)]  # dealt to each worker, not yet known done, in dealt order
        self._counted = counters.tickets_done().copy()  # each worker's done count when its _held was last trimmed
        self._done_before = int(self._counted.sum())
        self._ended = [False] * workers  # sent None
        self._steps_left = None if max_steps is None else max_steps - counters.global_updates()
        self._skipped_before = counters.skipped_total()
        self._dealt = 0  # tickets dealt and not given back
        self._next = 0  # the worker the dealer serves first on its next round
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # the traceback of what stopped the dealer (a stream's iterator that raised)

    def _epoch_order(self) -> np.ndarray:
        return epoch_order(self.n, self.seed, self._epoch, self.shuffle)

    def mailbox(self, worker: int) -> Mailbox:
        return Mailbox(self.queues[worker], self.room)

    def start(self, stopped: Callable[[], bool], failed: Callable[[], None] = lambda: None) -> None:
        """Start the dealer; failed() is called (on its thread) if it stops on an error, which `error` then holds."""
        self._thread = threading.Thread(target=self._deal, args=(stopped, failed), name="hogwild-feed", daemon=True)
        self._thread.start()

    def _deal(self, stopped: Callable[[], bool], failed: Callable[[], None]) -> None:
        try:
            while not stopped():
                self._read_ahead()
                with self._lock:
                    dealt, waiting = self._round()
                if not dealt:  # every queue full, or the budget waits on updates in flight: sleep until a worker reads
                    self.room.acquire(timeout=_BUDGET_POLL if waiting else _POLL)
        except Exception:  # noqa: BLE001 - the run stops, naming it (engine.py)
            self.error = traceback.format_exc().rstrip()
            failed()

    def _round(self) -> tuple[int, bool]:
        """Deal to every worker with room, one item each per pass, until none can take more. Returns (items put,
        whether dealing waits on updates in flight)."""
        done = self.counters.tickets_done()
        put, waiting, progress = 0, False, True
        while progress:
            progress = False
            for worker in [(self._next + k) % self.workers for k in range(self.workers)]:
                if self._ended[worker] or self.queues[worker].full():
                    continue
                self._trim(worker, done[worker])
                if self.hold is not None and len(self._held[worker]) >= self.hold:  # the rest: for whoever is faster
                    continue
                item = self._take(done)
                if item is _WAIT:
                    waiting = True
                    break
                self.queues[worker].put_nowait(item)  # only the dealer puts: a queue that is not full has room
                if item is None:
                    self._ended[worker] = True
                else:
                    self._held[worker].extend(item)
                    self._dealt += len(item)
                put, progress = put + 1, True
            self._next = (self._next + 1) % self.workers
        return put, waiting

    def _take(self, done: np.ndarray) -> list[Ticket] | None | object:
        """The next item for a worker: returned tickets first, then the data's; None when there is nothing left to
        deal; _WAIT while max_steps has no slot free but updates are in flight (a skipped one frees its slot)."""
        size, left = self.chunk, None  # left: tickets still to deal, where the run has an end
        if self.epochs is not None:
            left = len(self._returned) + (self.epochs - self._epoch) * self.n - self._position
        if self._steps_left is not None:
            free = self._steps_left - self._dealt + (self.counters.skipped_total() - self._skipped_before)
            if free <= 0:
                return None if self._dealt == int(done.sum()) - self._done_before else _WAIT  # all done: the end
            size, left = min(size, free), free if left is None else min(left, free)
        if left is not None and self.hold is not None:  # near the end, smaller items: no long tail on one worker
            size = min(size, max(1, left // (2 * self.workers)))
        if self._returned:
            return [self._returned.popleft() for _ in range(min(size, len(self._returned)))]
        return self._fresh(size) or (None if self._data_ended() else _WAIT)

    def _read_ahead(self) -> None:
        """What to do outside the lock before each round (a stream reads its next batch)."""

    def _data_ended(self) -> bool:
        """Whether _fresh gives nothing because the data are over (else: nothing yet, a stream still reading)."""
        return True

    def _fresh(self, size: int) -> list[tuple]:
        """Up to `size` tickets the data has not dealt yet, in feed order ([] at its end)."""
        chunk = []
        while len(chunk) < size and (self.epochs is None or self._epoch < self.epochs):
            chunk.append((self._epoch * self.n + self._position, self._epoch, int(self._order[self._position])))
            self._position += 1
            if self._position == self.n:
                self._epoch, self._position = self._epoch + 1, 0
                self._order = self._epoch_order()
        return chunk

    def _trim(self, worker: int, done: int) -> None:
        """Forget the tickets `worker` has counted done since the last trim (the first ones it was dealt)."""
        held = self._held[worker]
        for _ in range(min(int(done - self._counted[worker]), len(held))):
            held.popleft()
        self._counted[worker] = max(self._counted[worker], done)

    def waiting(self) -> list[bool]:
        """Per worker, whether it holds no ticket it has not counted done (nothing queued for it, nothing in
        training): it waits on the dealer - at max_steps, for the updates still in flight elsewhere -, not a hang."""
        done = self.counters.tickets_done()
        with self._lock:
            for worker in range(self.workers):
                self._trim(worker, done[worker])
            return [not held for held in self._held]

    def reassign(self, worker: int) -> Mailbox:
        """`worker`'s process has died (and been reaped): the tickets it had not counted go back to be dealt first,
        and a new queue waits for the process that takes its place."""
        with self._lock:
            self._trim(worker, self.counters.tickets_done()[worker])
            back = self._held[worker]
            self._returned.extendleft(reversed(back))
            self._dealt -= len(back)
            self._held[worker] = deque()
            old, self.queues[worker] = self.queues[worker], self.ctx.Queue(maxsize=self.depth)
            self._ended[worker] = False
        old.cancel_join_thread()  # its reader is gone: never wait to flush tickets into it
        old.close()
        self.room.release()  # wake the dealer for the new queue
        return self.mailbox(worker)

    def resume_seq(self) -> int:
        """The checkpoint's data position: the first ticket not known to be done (held by a worker - queued,
        received, being trained -, given back, or not dealt yet). Later tickets done by other workers are trained
        again on resume: at most a few queue items per worker."""
        with self._lock:
            done = self.counters.tickets_done()
            first = self._epoch * self.n + self._position
            for worker in range(self.workers):
                self._trim(worker, done[worker])
                first = min([first] + [ticket[0] for ticket in self._held[worker]])
            return min([first] + [ticket[0] for ticket in self._returned])

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=2 * _POLL + 1)
        for tickets in self.queues:
            tickets.cancel_join_thread()  # never block exit on tickets nobody will read
            tickets.close()


_WAIT = object()  # BatchFeed._take: nothing to deal now, maybe later


_arrived: dict[int, Any] = {}  # in a worker of a streamed run: the batch of the ticket QueueReader last returned


def take_arrived(index: int) -> Any:
    """The batch that came with the ticket of `index` (QueueReader just returned it), once."""
    return _arrived.pop(index)


class QueueReader:
    """Worker side of 'queue' mode. next() -> (epoch, index), or None at the end of the data or on stop.

    Tickets received but not started stay 'in progress' in the counters (IN_PROGRESS holds the first of them)."""

    def __init__(self, mailbox: Mailbox, stopped: Callable[[], bool], view: Any):
        self.tickets, self.room, self.stopped, self.view = mailbox.queue, mailbox.room, stopped, view
        self.pending: list[Ticket] = []  # received, not yet started, in feed order

    def next(self, idle: Callable[[], None] | None = None) -> tuple[int, int] | None:
        """idle(): called once if the queue is empty, before waiting on it (the worker lands an update it holds back:
        at max_steps the dealer sends the end only once every update dealt has landed)."""
        while not self.pending and not self.stopped():
            try:
                chunk = self.tickets.get(timeout=_POLL if idle is None else 0)
            except queue.Empty:
                if idle is not None:
                    idle()
                    idle = None
                continue
            self.room.release()
            if chunk is None:
                return None
            self.view.received(chunk[0][0], chunk[-1][0])
            self.pending = chunk[::-1]  # pop() from the end takes them in feed order
        if not self.pending or self.stopped():
            return None
        seq, epoch, index, *batch = self.pending.pop()  # a streamed ticket brings its batch
        if batch:
            _arrived[index] = batch[0]
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

    def next(self, idle: Callable[[], None] | None = None) -> tuple[int, int] | None:
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
