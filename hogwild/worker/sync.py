"""mode='sync': the baseline on equal terms - synchronous data-parallel SGD over the same workers.

Every step each of the W workers takes the next batch of the epoch's order (worker r takes position g*W + r of
group g), computes its gradient, and the gradients are averaged with torch.distributed all_reduce (gloo on CPU,
NCCL on GPU, gloo when ranks share a GPU). Worker 0 applies the averaged gradient to the shared parameters with
the same shared optimizer as Hogwild mode; a barrier makes the update visible before anyone reads the parameters
again. Staleness is 0. The last group of an epoch may be short: the average is over the batches that exist. Sparse
gradients (nn.Embedding(sparse=True)) stay sparse: the ranks all-gather the rows their batches touched, and the
average is a sparse gradient over the union of those rows, which the shared optimizer applies row-wise (lazily), as
in Hogwild mode. Averaging them densely made every step all-reduce and apply the whole table: 32 sync steps/s on
the POS tagger (28,775 x 128 words) against 41.5 by rows and 129 steps/s of one worker (docs/benchmarks.md).
Stopping is decided collectively (every step all workers vote) so no worker waits forever.

A rank that dies (killed, out of memory) leaves its peers inside a collective. Over gloo the collective fails at
once; the peer then waits up to PEER_GRACE seconds for the parent, which notices the dead rank within a tick, to stop
the run, and exits quietly, so that the run's failure names the rank that died, not the collateral errors of its
peers. Over NCCL the collective blocks instead; the parent stops the run within Config.join_timeout (it kills ranks
that do not finish their step). NCCL ranks (one GPU each) bind their process group to their device (`device_id`)
and, like the Hogwild GPU workers, register the shared parameters page-locked so that every pull is asynchronous DMA.

Serves step 3 of `hogwild.train` (spawn): the process the engine spawns per device in mode='sync'. It shares a
step's arithmetic (gradients.py) and its process prelude (process_prelude.py) with the Hogwild worker.

Usage (engine.py): `ctx.Process(target=sync_main, args=(spec, "file:///tmp/x/rendezvous")).start()`
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from ..feed.tickets import epoch_order
from .gradients import NonFiniteStreak, batch_seed, forward_backward, seed_batch, usable_gradients
from .process_prelude import WorkerSpec, run_worker_process
from .replica import (DeviceReplica, PageLocked, SharedParameters, make_parameters, move_batch, sparse_tables,
                      torch_device)

PEER_GRACE = 5.0  # seconds a rank whose collective failed waits for the parent to stop the run (a peer died)
INIT_TIMEOUT = timedelta(seconds=120)  # the rendezvous waits this long for every rank to start


class PeerLost(Exception):
    """A collective failed and the run was stopped meanwhile: a peer rank died, which the parent reports."""


@contextmanager
def collective(stopped: Callable[[], bool]) -> Iterator[None]:
    """Around collectives: a RuntimeError followed within PEER_GRACE seconds by the parent's stop becomes PeerLost
    (the rank ends quietly and the parent names the rank that died); otherwise the error is this rank's own."""
    try:
        yield
    except RuntimeError as error:
        deadline = time.monotonic() + PEER_GRACE
        while not stopped() and time.monotonic() < deadline:
            time.sleep(0.01)
        if stopped():
            raise PeerLost(str(error)) from error
        raise


def _flat_gradients(params: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """All gradients in one dense vector (zeros where a parameter got none). (sum of numel,)"""
    pieces = []
    for param in params:
        grad = param.grad
        if grad is None:
            pieces.append(torch.zeros(param.numel(), dtype=param.dtype, device=device))
        else:
            pieces.append((grad.to_dense() if grad.is_sparse else grad).reshape(-1))
    return torch.cat(pieces)


def _set_gradients(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    for param in params:
        param.grad = flat[offset:offset + param.numel()].view_as(param)
        offset += param.numel()


def _average_sparse(param: torch.Tensor, count: float, backend: str) -> torch.Tensor | None:
    """The mean over ranks of `param`'s sparse gradient (None on a rank without a batch): every rank's touched rows
    all-gathered, summed where they coincide, divided by `count`. None when no rank touched a row."""
    grad = param.grad.coalesce() if param.grad is not None else None
    # gloo's all_gather takes CPU tensors; NCCL's stay on the GPU
    device = param.device if backend == "nccl" else torch.device("cpu")
    rows = grad.indices()[0].to(device) if grad is not None else torch.empty(0, dtype=torch.int64, device=device)
    values = grad.values().to(device) if grad is not None else torch.empty((0, *param.shape[1:]), dtype=param.dtype,
                                                                          device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([rows.numel()], dtype=torch.int64, device=device))
    longest = int(max(sizes).item())
    if longest == 0:
        return None
    padding = longest - rows.numel()  # all_gather needs equal shapes: pad with row 0 and zero values, then trim
    rows = torch.cat([rows, rows.new_zeros(padding)])
    values = torch.cat([values, values.new_zeros((padding, *values.shape[1:]))])
    all_rows, all_values = [torch.empty_like(rows) for _ in sizes], [torch.empty_like(values) for _ in sizes]
    dist.all_gather(all_rows, rows)
    dist.all_gather(all_values, values)
    kept = [int(size.item()) for size in sizes]
    rows = torch.cat([r[:k] for r, k in zip(all_rows, kept)])  # (R,)
    values = torch.cat([v[:k] for v, k in zip(all_values, kept)])  # (R, *row_shape)
    # rows come from the ranks' own gradients of this table, so they are in range: no invariant check needed
    mean = torch.sparse_coo_tensor(rows.unsqueeze(0), values.div_(count), param.shape, check_invariants=False)
    return mean.coalesce().to(param.device)


def average_gradients(params: list[torch.Tensor], sparse: set[int], count: float, backend: str) -> None:
    """Replace every rank's gradients by their mean over the `count` batches of this step: the dense ones with one
    all-reduce of a flat vector, the sparse ones (indices in `sparse`) by gathering the touched rows."""
    dense = [p for i, p in enumerate(params) if i not in sparse]
    if dense:
        flat = _flat_gradients(dense, dense[0].device)
        dist.all_reduce(flat)
        _set_gradients(dense, flat.div_(count))
    for index in sorted(sparse):
        params[index].grad = _average_sparse(params[index], count, backend)


def sync_loop(spec: WorkerSpec, stopped: Callable[[], bool]) -> None:
    """One rank of synchronous data-parallel training."""
    # Gradients are averaged on the device first, then copied to the host at push().
    params = make_parameters(spec.model, spec.device)
    pinned = PageLocked(params.shared + params.shared_buffers) \
        if params.device.type == "cuda" and spec.config.pin_shared else None  # pulls as the Hogwild GPU workers'
    try:
        _train_steps(spec, stopped, params)
    finally:
        if pinned is not None:
            pinned.close()


def _train_steps(spec: WorkerSpec, stopped: Callable[[], bool], params: SharedParameters | DeviceReplica) -> None:
    config = spec.config
    schedule = config.schedule()  # lr = schedule(global_step, epoch)
    rank, world = spec.worker, config.workers
    view, batches = spec.counters.worker_view(rank), spec.store.load()
    sparse, backend = set(sparse_tables(spec.model)), dist.get_backend()
    spec.optimizer.attach(params.shared)
    n = len(batches)
    votes = torch.zeros(2, dtype=torch.float64, device=params.device)  # [ranks wanting to stop, batches this step]
    epoch, position = divmod(spec.start_seq, n)
    first = position - position % world
    view.ready()
    deadline = spec.control.wait_for_start(stopped, config.time_limit)
    streak = NonFiniteStreak(spec.worker, config.max_nonfinite_in_a_row)
    while config.epochs is None or epoch < config.epochs:
        order = epoch_order(n, config.seed, epoch, config.shuffle)
        for group in range(first, n, world):
            mine = group + rank
            over = (config.max_steps is not None and view.global_updates() >= config.max_steps) or (
                deadline is not None and time.time() >= deadline)
            votes[0], votes[1] = float(stopped() or over), float(mine < n)
            with collective(stopped):
                dist.all_reduce(votes)
            if votes[0] > 0:
                return
            read_version, loss, start = view.global_updates(), None, time.perf_counter()
            if mine < n:
                view.take(epoch * n + mine)
                index = int(order[mine])
                batch = move_batch(batches[index], params.device, non_blocking=True)
                seed_batch(params.device, batch_seed(config.seed, epoch, index))
                loss, examples = forward_backward(spec.loss_fn, params.pull(), batch)
            computed = time.perf_counter()
            with collective(stopped):
                average_gradients(params.grad_params, sparse, float(votes[1]), backend)  # the 'push' phase of a step
            if rank == 0:
                if usable_gradients(params.grad_params, config.clip_norm, config.skip_nonfinite):
                    pushed = time.perf_counter()
                    grads = params.push()  # None: already on the shared parameters ('cpu')
                    for param, grad in zip(params.shared, grads or []):
                        param.grad = grad
                    lr = schedule(read_version, epoch)
                    spec.optimizer.step(lr)
                    phases = (0.0, computed - start, pushed - computed, time.perf_counter() - pushed)
                    view.applied(0, examples, loss.item(), lr, phases)
                    streak.applied()
                else:
                    view.skipped()
                    streak.skipped()
            elif loss is not None:
                view.contributed(examples, loss.item())
            params.clear()
            view.finished()
            with collective(stopped):
                dist.barrier()  # the update has landed before any rank reads the parameters again
        epoch, first = epoch + 1, 0


def process_group_backend(devices: list[str]) -> str:
    """NCCL when every rank has a GPU of its own; gloo on CPU and when ranks share a GPU (NCCL cannot run two ranks on
    one device; gloo all-reduces CUDA tensors through the host)."""
    cuda = [("cuda:0" if d == "cuda" else d) for d in devices]
    if all(d.startswith("cuda") for d in cuda) and len(set(cuda)) == len(cuda):
        return "nccl"
    return "gloo"


def sync_main(spec: WorkerSpec, init_method: str) -> None:
    """Process entry point for one rank (process_prelude.py runs the prelude and reports a failure, as for a Hogwild
    worker)."""
    run_worker_process(spec, lambda stopped: _join_and_train(spec, init_method, stopped))


def _join_and_train(spec: WorkerSpec, init_method: str, stopped: Callable[[], bool]) -> None:
    config = spec.config
    backend = process_group_backend(config.devices)
    bound = {"device_id": torch_device(spec.device)} if backend == "nccl" else {}  # one GPU per rank: bind it
    dist.init_process_group(backend, init_method=init_method, rank=spec.worker, world_size=config.workers,
                            timeout=INIT_TIMEOUT, **bound)
    try:
        sync_loop(spec, stopped)
    except PeerLost:
        pass  # a peer died: the parent reports that rank and has stopped the run
    finally:
        dist.destroy_process_group()
