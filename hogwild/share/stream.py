"""A stream of batches: batches that cannot be indexed (a torch IterableDataset, a generator, a DataLoader) are
read by the parent as the workers' queues have room and sent with their tickets, so the parent holds only the batches
dealt and not yet done (a few per worker, kept to deal again if their worker dies), whatever the stream's length.

An epoch is one pass (`iter()` again for the next one; an iterator is read once). A ticket's seq is `epoch *
STREAM_EPOCH + position in the pass`, so the checkpoint's data position needs nothing else: a resumed run starts the
pass again and skips the batches already taken. In a worker, `ArrivingBatches` stands for the batches (what its
batch store holds): indexed by the ticket's index, it gives the batch that came with it (feed.py's QueueReader).
What needs every batch before training (a shape scan: graphs, compile; sparse tables sized by the largest batch)
cannot be had: hogwild.train refuses it (engine.py).

Serves step 3 of `hogwild.train` (spawn), as feed.py does.

Usage: `if is_streamed(batches): feed = StreamFeed(ctx, batches, workers=2, epochs=1, depth=16, counters=counters)`;
`BatchStore(ArrivingBatches(), directory)`
"""
from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from .feed import BatchFeed, take_arrived

STREAM_EPOCH = 1 << 40  # a streamed ticket's seq: epoch * STREAM_EPOCH + its position in the pass
_END = object()  # next(iterator, _END): the pass is over


def is_streamed(batches: Any) -> bool:
    """Whether the batches are streamed (StreamFeed): an IterableDataset, or an iterable that cannot be indexed (a
    generator, a DataLoader). A Sequence or a map-style Dataset (`__getitem__` and `__len__`) is stored instead."""
    if isinstance(batches, IterableDataset):
        return True
    if isinstance(batches, Sequence) or (hasattr(batches, "__getitem__") and hasattr(batches, "__len__")):
        return False
    if isinstance(batches, Iterable):
        return True
    raise TypeError(f"batches must be a sequence, a torch Dataset or an iterable of batches, got "
                    f"{type(batches).__name__}")


class StreamFeed(BatchFeed):
    """Parent side of a streamed run (`is_streamed`): the dealer reads the batches from `stream` one at a time, as the
    workers' queues have room, a pass per epoch, and deals each with its ticket `(seq, epoch, position, batch)`. It
    reads outside the feed's lock, so a slow stream (a network) never holds up the parent's loop. No order of its
    own: Config.shuffle is the iterable's to do. A pass that gives nothing (an iterator already read, an empty
    iterable) ends the data, with a warning."""

    def __init__(self, ctx: Any, stream: Iterable, workers: int, epochs: int | None, depth: int, counters: Any,
                 start_seq: int = 0, max_steps: int | None = None):
        super().__init__(ctx, STREAM_EPOCH, workers, epochs, 0, False, depth, counters, start_seq, max_steps)
        self.chunk = 1  # each item carries its batch: one at a time keeps what the queues hold small
        self.hold = 2 if workers > 1 else None
        self.stream, self._iterator = stream, None
        self._reading = (self._epoch, self._position)  # where the reader is; a resumed pass skips what was taken
        self._ahead: deque[tuple[int, int, Any]] = deque()  # (epoch, position, batch): read, not dealt (one at most)
        self._over = False

    def _epoch_order(self) -> None:
        return None

    def _read_ahead(self) -> None:
        """Read the stream's next batch if none is waiting to be dealt (the dealer's thread, without the lock)."""
        while not self._ahead and not self._over:
            epoch, position = self._reading
            if self.epochs is not None and epoch >= self.epochs:
                self._over = True
                return
            if self._iterator is None:
                self._iterator = iter(self.stream)
                for _ in range(position):  # a resumed pass: the batches taken before (read again, not dealt)
                    if next(self._iterator, _END) is _END:
                        break
            batch = next(self._iterator, _END)
            if batch is _END:  # the pass is over
                if position == 0:
                    warnings.warn(f"the batches gave none in pass {epoch + 1}: the data ends there (an iterator, "
                                  f"such as a generator, is read once: to train more than one epoch hand an "
                                  f"iterable whose iter() starts again, such as an IterableDataset)", RuntimeWarning)
                    self._over = True
                self._reading, self._iterator = (epoch + 1, 0), None
                continue
            self._ahead.append((epoch, position, batch))
            self._reading = (epoch, position + 1)

    def _fresh(self, size: int) -> list[tuple]:
        chunk = []
        while len(chunk) < size and self._ahead:
            epoch, position, batch = self._ahead.popleft()
            chunk.append((epoch * self.n + position, epoch, position, batch))
            self._epoch, self._position = epoch, position + 1
        return chunk

    def _data_ended(self) -> bool:
        return self._over and not self._ahead


class ArrivingBatches(Dataset):
    """A streamed run's batches in a worker (what its batch store holds): `batches[index]` is the batch that came with
    the ticket of that index, once. Nothing is known ahead: it iterates as empty and its length is 0 (no shape scan
    at start-up: hogwild.train refuses what needs one)."""

    def __getitem__(self, index: int) -> Any:
        return take_arrived(index)

    def __len__(self) -> int:
        return 0

    def __iter__(self):
        return iter(())
