"""Step 2 of `hogwild.train`, share: what the parent shares with every worker, and its saved form.

`share(model, config, saved, run_dir, batches) -> SharedRun` (shared_run.py) is the step's entry: it checks the
machine and /dev/shm (resources.py), moves the model and the optimizer state (hogwild/shared_optim.py) to shared
memory, creates the shared run state (run_state.py: per-worker counters, the stop and start flags)
and loads a resumed `last.pt` into them (checkpoint.py, which also writes last.pt / best.pt later). Step 3 adds the
batches every worker maps (batch_store.py) and the feed of tickets each worker reads (feed.py; a stream of batches
that cannot be indexed comes with its tickets: stream.py).

Usage (engine.py): `shared = share(model, config, saved, run_dir, batches)`;
`store = BatchStore(batches, scratch)`; `feed = BatchFeed(ctx, len(batches), workers, epochs, seed, shuffle, ...)`
"""
from .batch_store import BatchStore
from .feed import BatchFeed
from .run_state import CounterSnapshot, RunControl, SharedCounters
from .shared_run import SharedRun, share

__all__ = ["share", "SharedRun", "SharedCounters", "CounterSnapshot", "RunControl", "BatchStore", "BatchFeed"]
