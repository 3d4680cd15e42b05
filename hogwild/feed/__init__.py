"""Step 3 of `hogwild.train`, spawn: the feed, which batch each worker trains next and where it finds it.

The parent writes the batches once into a store every worker maps (batch_store.py), in the run's scratch folder
(scratch.py), and deals tickets `(seq, epoch, index)` to each worker's own queue, or gives each worker its shard
(tickets.py); a stream of batches that cannot be indexed is read as the queues have room and its batches sent with
their tickets (stream.py). It shares no training state: the counters it reads and writes are share/'s, handed in.

Usage (engine.py): `store = BatchStore(batches, scratch)`; `feed = BatchFeed(ctx, len(batches), workers, epochs, seed,
shuffle, ...)` or `StreamFeed(ctx, stream, ...)`; in a worker `QueueReader(feed.mailbox(w), stop, view)`
"""
from .batch_store import BatchStore
from .stream import StreamFeed
from .tickets import BatchFeed, epoch_order

__all__ = ["BatchStore", "BatchFeed", "StreamFeed", "epoch_order"]
