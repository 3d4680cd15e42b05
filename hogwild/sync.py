"""mode='sync': the baseline on equal terms - synchronous data-parallel SGD over the same workers.

Every step each of the W workers takes the next batch of the epoch's order (worker r takes position g*W + r of
group g), computes its gradient, and the gradients are averaged with torch.distributed all_reduce (gloo on CPU,
NCCL on GPU, gloo when ranks share a GPU). Worker 0 applies the averaged gradient to the shared parameters with
the same shared optimizer as Hogwild mode; a barrier makes the update visible before anyone reads the parameters
again. Staleness is 0. The last group of an epoch may be short: the average is over the batches that exist. Sparse
gradients are averaged densely. Stopping is decided collectively (every step all workers vote) so no worker waits
forever.

Usage (engine.py): `ctx.Process(target=sync_main, args=(spec, "file:///tmp/x/rendezvous")).start()`
"""
from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from .feed import epoch_order
from .replica import make_parameters, move_batch, torch_device
from .supervisor import PARENT_SIGNALS, die_with_parent
from .worker import (STOP, NonFiniteStreak, WorkerSpec, batch_seed, bind_device, call_loss, exit_now, seed_batch,
                     usable_gradients, wait_for_start)


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


def sync_loop(spec: WorkerSpec, stopped: Callable[[], bool]) -> None:
    """One rank of synchronous data-parallel training."""
    config = spec.config
    rank, world = spec.worker, config.workers
    view, batches = spec.counters.worker_view(rank), spec.store.load()
    # Gradients are averaged on the device first, so they are copied to the host at push(), not during backward.
    params = make_parameters(spec.model, spec.device, copy_in_backward=False)
    spec.optimizer.attach(params.shared)
    n = len(batches)
    votes = torch.zeros(2, dtype=torch.float64, device=params.device)  # [ranks wanting to stop, batches this step]
    epoch, position = divmod(spec.start_seq, n)
    first = position - position % world
    view.ready()
    deadline = wait_for_start(spec.control, stopped, config.time_limit)
    streak = NonFiniteStreak(spec.worker, config.max_nonfinite_in_a_row)
    while config.epochs is None or epoch < config.epochs:
        order = epoch_order(n, config.seed, epoch, config.shuffle)
        for group in range(first, n, world):
            mine = group + rank
            over = (config.max_steps is not None and view.global_updates() >= config.max_steps) or (
                deadline is not None and time.time() >= deadline)
            votes[0], votes[1] = float(stopped() or over), float(mine < n)
            dist.all_reduce(votes)
            if votes[0] > 0:
                return
            read_version, loss, start = view.global_updates(), None, time.perf_counter()
            if mine < n:
                view.take(epoch * n + mine)
                index = int(order[mine])
                batch = move_batch(batches[index], params.device, non_blocking=True)
                seed_batch(params.device, batch_seed(config.seed, epoch, index))
                loss, examples = call_loss(spec.loss_fn, params.pull(), batch)
                loss.backward()
            computed = time.perf_counter()
            flat = _flat_gradients(params.grad_params, params.device)
            dist.all_reduce(flat)  # the 'push' phase of a synchronous step
            _set_gradients(params.grad_params, flat.div_(votes[1]))
            if rank == 0:
                if usable_gradients(params.grad_params, config.clip_norm, config.skip_nonfinite):
                    pushed = time.perf_counter()
                    grads = params.push()  # None: already on the shared parameters ('cpu')
                    for param, grad in zip(params.shared, grads or []):
                        param.grad = grad
                    lr = spec.schedule(read_version, epoch)
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
    """Process entry point for one rank; failures are reported like a Hogwild worker's."""
    config = spec.config
    try:
        for name in PARENT_SIGNALS:
            signal.signal(name, signal.SIG_IGN)
        die_with_parent(spec.parent_pid)
        torch.set_num_threads(config.threads_per_worker)
        bind_device(torch_device(spec.device))
        dist.init_process_group(process_group_backend(config.devices), init_method=init_method, rank=spec.worker,
                                world_size=config.workers, timeout=timedelta(seconds=120))
        control, parent = spec.control.numpy(), spec.parent_pid
        try:
            sync_loop(spec, lambda: bool(control[STOP]) or os.getppid() != parent)
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        spec.errors.put((spec.worker, traceback.format_exc()))
        spec.errors.close()
        spec.errors.join_thread()  # the traceback has reached the pipe
        exit_now(1)
    exit_now(0)
