"""Step 3 of `hogwild.train`, spawn: what runs inside every worker process.

Each process gets a `WorkerSpec` and runs process_prelude.py first (ignore the parent's signals, die with the
parent, threads, device; a failure's traceback goes back to the parent), then the Hogwild worker's loop
(worker.py's `worker_main`) or, for `mode="sync"`, the synchronous data-parallel worker (sync.py's `sync_main`,
imported when used). The Hogwild loop drives one step object: in place on the shared parameters for 'cpu' workers
(in_place.py), on a device replica otherwise (device_step.py: its pull prefetched by pull.py, its gradients gathered,
clipped and copied out by copy_out.py, its frequent batch shapes captured as CUDA graphs by capture.py with
Config.graphs); updates.py lands its updates (at once or one step behind). Both workers take a step's arithmetic
from gradients.py (batch seeds, forward and backward, norm, clipping, finiteness; the compiled loss and TF32); the
sync worker pulls and pushes through replica.py.

Usage (engine.py): `ctx.Process(target=worker_main, args=(WorkerSpec(...),))`
"""
from .process_prelude import WorkerSpec
from .worker import worker_main

__all__ = ["WorkerSpec", "worker_main"]
