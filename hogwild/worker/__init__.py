"""Step 3 of `hogwild.train`, spawn: what runs inside every worker process.

Each process gets a `WorkerSpec` and runs process_prelude.py first (ignore the parent's signals, die with the
parent, threads, device; a failure's traceback goes back to the parent), then the Hogwild worker's loop
(worker.py's `worker_main`) or, for `mode="sync"`, the synchronous data-parallel worker (sync.py's `sync_main`,
imported when used). Both take a step's arithmetic from gradients.py (batch seeds, loss, norm, clipping,
finiteness; the compiled loss and TF32); the Hogwild worker also replica.py (where it computes: in place or on a
device replica) and updates.py (when its update lands: at once or one step behind). A graphed device worker
(Config.graphs, on for GPU workers by default) runs step_graph.py instead of replica.py: one CUDA graph per batch shape,
its gradients gathered, clipped and copied out by copy_out.py, its pull prefetched by pull.py, its graphs captured
(and a failed capture undone) by capture.py.

Usage (engine.py): `ctx.Process(target=worker_main, args=(WorkerSpec(...),))`
"""
from .process_prelude import WorkerSpec
from .worker import worker_main

__all__ = ["WorkerSpec", "worker_main"]
