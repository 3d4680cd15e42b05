"""The Hogwild worker process: take a batch, compute its gradient, update the shared parameters without locks.

This is the only code (with sync.py, its synchronous twin) that calls backward(); the optimizer step it submits
is applied by updates.py (at once, or on a device one step later in a background thread while the next step
computes). A step reads the device once: the gradients' finiteness (or norm) and the loss in one transfer.
Everything a worker needs arrives once, pickled at spawn, in a `WorkerSpec`; afterwards a step exchanges
no Python objects with other processes except a small ticket from the feed queue.

Usage (engine.py): `ctx.Process(target=worker_main, args=(spec,)).start()`
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .batch_store import BatchStore
from .config import Config
from .counters import PhaseClock, SharedCounters, StepBudget
from .feed import PartitionReader, QueueReader
from .replica import (
    DeviceReplica,
    PageLocked,
    SharedParameters,
    make_parameters,
    move_batch,
    torch_device,
)
from .run_control import RunControl
from .shared_optim import FUSED_OPTIMIZERS
from .supervisor import PARENT_SIGNALS, die_with_parent
from .updates import Update, Updater, scale_gradients

@dataclass
class WorkerSpec:
    """Everything one worker needs (shared tensors travel as shared-memory handles)."""

    worker: int
    device: str
    config: Config  # the run's settings (workers, seed, stop conditions, clipping, threads...)
    model: nn.Module  # parameters and buffers in shared memory
    loss_fn: Callable
    optimizer: Any  # hogwild.shared_optim.SharedOptimizer
    schedule: Callable[[int, int], float]  # lr = schedule(global_step, epoch)
    store: BatchStore
    counters: SharedCounters
    control: RunControl  # the run's stop and start flags
    tickets: Any  # queue of tickets, None in partition mode
    errors: Any  # queue for (worker, traceback text)
    parent_pid: int
    budget: StepBudget | None = None  # with config.max_steps: the shared count of claimed update slots
    partition_start: tuple[int, int] = (0, 0)  # partition mode: (epoch, position) to resume at
    start_seq: int = 0  # sync mode: the first ticket to train (resume)


def batch_seed(seed: int, epoch: int, index: int) -> int:
    """The torch RNG seed of one batch (dropout masks): the same whichever worker trains it, and after resume."""
    return ((seed * 1_000_003 + epoch) * 10_000_019 + index) % (2**63 - 1)  # any Config.seed fits the generator


def seed_batch(device: torch.device, seed: int) -> None:
    """Seed the RNGs a batch's forward may use (dropout): torch.manual_seed costs ~250 us, this ~1 us."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


def batch_examples(batch: Any) -> int:
    """Leading dimension of the first tensor in the batch (the examples it holds)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        count = batch_examples(value)
        if count:
            return count
    return 0


def call_loss(loss_fn: Callable, model: nn.Module, batch: Any) -> tuple[torch.Tensor, int]:
    """loss_fn returns a scalar loss, or (loss, number of tokens/examples)."""
    out = loss_fn(model, batch)
    if isinstance(out, (tuple, list)):
        return out[0], int(out[1])
    return out, batch_examples(batch)


def global_norm(params: list[torch.Tensor]) -> torch.Tensor | None:
    """Global L2 norm of the gradients as a 0-d tensor on their device (None without any); sparse gradients are
    coalesced in place first, so duplicate rows are summed and the norm sees the true rows."""
    dense, norms = [], []
    for param in params:
        if param.grad is None:
            continue
        if param.grad.is_sparse:
            param.grad = param.grad.coalesce()
            norms.append(torch.linalg.vector_norm(param.grad._values()))
        else:
            dense.append(param.grad)
    if dense:
        norms.extend(torch._foreach_norm(dense))
    if not norms:
        return None
    return torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))


def clip_scale(total: float, clip_norm: float | None) -> float | None:
    """torch.nn.utils.clip_grad_norm_'s coefficient when the norm `total` exceeds clip_norm, else None."""
    if clip_norm is not None and math.isfinite(total) and total > clip_norm:
        return clip_norm / (total + 1e-6)
    return None


def gradient_norm(params: list[torch.Tensor], clip_norm: float | None) -> float:
    """Global L2 norm of the gradients (inf/nan when any is not finite); clips them in place to clip_norm."""
    total = global_norm(params)
    total = 0.0 if total is None else total.item()
    scale = clip_scale(total, clip_norm)
    if scale is not None:
        scale_gradients([p.grad for p in params], scale)
    return total


def usable_gradients(params: list[torch.Tensor], clip_norm: float | None, check: bool = True) -> bool:
    """True when every gradient is finite (then clipped to clip_norm if given). Without clipping a sum per
    tensor decides - a NaN or inf anywhere makes it non-finite - at a third of the cost of the norms."""
    if clip_norm is not None:
        return math.isfinite(gradient_norm(params, clip_norm))
    if not check:
        return True
    sums = [(p.grad._values() if p.grad.is_sparse else p.grad).sum() for p in params if p.grad is not None]
    return not sums or math.isfinite(torch.stack(sums).sum().item())


def gradient_stats(params: list[torch.Tensor], check: "GradientCheck | None", clip_norm: float | None,
                   loss: torch.Tensor) -> tuple[bool, float | None, float]:
    """(usable, clip scale or None, loss value) of this step, reading the device once: the global gradient norm
    with clip_norm, else the sum of every gradient (non-finite iff one is) when `check` is given, and the loss."""
    stat = global_norm(params) if clip_norm is not None else check.total() if check is not None else None
    if stat is None:
        return True, None, loss.item()
    if stat.device.type == "cpu":  # nothing to wait for: two reads cost less than stacking
        value, loss_value = stat.item(), loss.item()
    else:  # one device->host transfer: the only wait for the device in an update
        value, loss_value = torch.stack([stat.double(), loss.detach().double()]).tolist()
    return math.isfinite(value), clip_scale(value, clip_norm), loss_value


class GradientCheck:
    """Are all of this step's gradients finite? Each parameter's gradient is summed the moment backward has
    accumulated it (a post-accumulate-grad hook, while the gradient is still in cache), so after backward only a
    few scalars remain to add: a separate pass over every gradient after backward cost 65-84 us of a ~2.9 ms step
    on the engine benchmark's RNN (23 us when the same pass repeats hot in a loop); after the hooks, 14-35 us
    remain. A NaN or inf anywhere makes the sum non-finite."""

    def __init__(self, params: list[torch.Tensor]):
        self.sums: list[torch.Tensor] = []
        for param in params:
            param.register_post_accumulate_grad_hook(self._record)

    def _record(self, param: torch.Tensor) -> None:
        grad = param.grad
        self.sums.append((grad._values() if grad.is_sparse else grad).sum())

    def total(self) -> torch.Tensor | None:
        """The sum of every gradient accumulated since the last call (0-d, on their device; None without any)."""
        sums, self.sums = self.sums, []
        return torch.stack(sums).sum() if sums else None

    def finite(self) -> bool:
        """True when every gradient accumulated since the last call is finite (.item(): waits for the device)."""
        total = self.total()
        return total is None or math.isfinite(total.item())


class NonFiniteStreak:
    """Counts a worker's consecutive skipped (non-finite) updates. Skipped updates never count towards max_steps,
    so once the shared parameters themselves are NaN/inf every step is skipped and the run would never end: past
    `limit` in a row, fail loudly instead (the supervisor stops the run and writes the checkpoint)."""

    def __init__(self, worker: int, limit: int | None):
        self.worker, self.limit, self.in_a_row = worker, limit, 0

    def applied(self) -> None:
        self.in_a_row = 0

    def skipped(self) -> None:
        self.in_a_row += 1
        if self.limit is not None and self.in_a_row >= self.limit:
            raise FloatingPointError(
                f"worker {self.worker}: {self.in_a_row} updates in a row had non-finite (NaN/inf) gradients, so "
                f"none was applied; the shared parameters have probably diverged. Lower the learning rate or set "
                f"clip_norm (Config.max_nonfinite_in_a_row={self.limit} sets this limit)")


def device_options(config: Config, device: str, optimizer: str) -> dict[str, bool]:
    """How a worker on `device` runs: overlap (update in a background thread), fused (CPU optimizer kernel),
    pin (register the shared storages page-locked). The automatic choices are on for GPUs only."""
    cuda = device.startswith("cuda")
    overlap = device != "cpu" and (cuda if config.overlap_update is None else config.overlap_update)
    fused = (cuda and optimizer in FUSED_OPTIMIZERS) if config.fused_step is None else config.fused_step
    return {"overlap": overlap, "fused": fused, "pin": cuda and config.pin_shared}


def bind_device(device: torch.device) -> None:
    """Make a GPU worker's device the current one: torch.cuda.manual_seed (seed_batch) and any allocation
    without an explicit device go to the current device, which is otherwise cuda:0 in every process."""
    if device.type == "cuda":
        torch.cuda.set_device(0 if device.index is None else device.index)  # 'cuda' is cuda:0 in a fresh process


def train_loop(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool]) -> None:
    """One worker's training loop: pull, compute, one read of the device, push, update (maybe one step later)."""
    config = spec.config
    view = reader.view
    options = device_options(config, spec.device, spec.optimizer.name)
    params = make_parameters(spec.model, spec.device, buffer_sets=2 if options["overlap"] else 1,
                             sparse_rows=config.sparse_pull)  # 'cpu': the shared parameters themselves
    pinned = PageLocked(params.shared + params.shared_buffers) if options["pin"] else None  # pin: device workers
    try:
        spec.optimizer.attach(params.shared, fused=options["fused"])
        updater = Updater(spec.optimizer, params.shared, spec.schedule, view, background=options["overlap"])
        try:
            batches = spec.store.load()
            view.ready()
            train_steps(spec, reader, stopped, params, updater, batches)
            updater.finish()  # the last step's update lands before the worker reports it stopped
        finally:
            updater.shutdown()
    finally:
        if pinned is not None:
            pinned.close()


def train_steps(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                params: SharedParameters | DeviceReplica, updater: Updater, batches: Any) -> None:
    config, view = spec.config, reader.view
    deadline = spec.control.wait_for_start(stopped, config.time_limit)
    streak = NonFiniteStreak(spec.worker, config.max_nonfinite_in_a_row)
    # Without clipping, finiteness is checked by hooks during backward; clipping computes the norm anyway.
    check = GradientCheck(params.grad_params) if config.skip_nonfinite and config.clip_norm is None else None
    budget = spec.budget  # None without max_steps; a claimed slot also covers an update still in flight
    clock, device = PhaseClock(params.device), params.device
    overlap = updater.executor is not None  # 'cpu' workers never hold an update back: skip its hand-offs per step
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if config.amp == "bf16" else nullcontext()
    while not stopped():
        if deadline is not None and time.time() >= deadline:
            break
        if budget is not None and not budget.claim():  # an update slot, so that max_steps is exact
            break
        ticket = reader.next()
        if ticket is None:
            if budget is not None:
                budget.release()
            break
        epoch, index = ticket
        batch = batches[index] if device.type == "cpu" else move_batch(batches[index], device, True)
        seed_batch(device, batch_seed(config.seed, epoch, index))
        read_version = view.global_updates()
        clock.mark()
        net = params.pull(batches[index])  # a replica: host->device copy of the shared parameters; 'cpu': the model
        clock.mark()
        if overlap:
            updater.release(clock.events[1] if clock.cuda else None)  # the previous update may now land
        with autocast:
            loss, examples = call_loss(spec.loss_fn, net, batch)  # reads the (shared) parameters
        loss.backward()  # on a device, each gradient's copy to the host starts as soon as it is ready
        clock.mark()
        usable, scale, loss_value = gradient_stats(params.grad_params, check, config.clip_norm, loss)
        grads = params.push()  # host gradients (waits for their copies)
        clock.mark()
        if overlap:
            updater.wait()  # the previous update has landed: one update at a time, and its buffers are free again
        if usable:
            updater.submit(Update(grads, read_version, epoch, examples, loss_value, clock.seconds(), scale))
            streak.applied()
        else:
            clock.seconds()
            view.skipped()  # never write a non-finite gradient into the shared parameters
            if budget is not None:
                budget.release()  # skipped updates do not count towards max_steps
            streak.skipped()
        params.clear()
        reader.done()


def exit_now(code: int) -> None:
    """Leave without interpreter teardown: everything a worker produces is already in shared memory or sent,
    and tearing down torch took seconds per worker on a busy machine (which the parent would wait for)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def worker_main(spec: WorkerSpec) -> None:
    """Process entry point: report any exception with its traceback and exit non-zero."""
    config = spec.config
    try:
        for name in PARENT_SIGNALS:  # Ctrl-C, `timeout` and batch schedulers signal the whole process group: the
            signal.signal(name, signal.SIG_IGN)  # parent decides (it stops the workers, then checkpoints)
        die_with_parent(spec.parent_pid)
        torch.set_num_threads(config.threads_per_worker)
        bind_device(torch_device(spec.device))
        control, view = spec.control, spec.counters.worker_view(spec.worker)
        parent = spec.parent_pid

        def stopped() -> bool:
            return control.stopping or os.getppid() != parent

        if spec.tickets is None:
            epoch, position = spec.partition_start
            reader = PartitionReader(spec.store.length, config.workers, spec.worker, config.epochs, config.seed,
                                     config.shuffle, stopped, view, epoch, position)
        else:
            reader = QueueReader(spec.tickets, stopped, view)
        train_loop(spec, reader, stopped)
    except BaseException:  # noqa: BLE001 - anything, even SystemExit, is reported to the parent
        spec.errors.put((spec.worker, traceback.format_exc()))
        spec.errors.close()
        spec.errors.join_thread()  # the traceback has reached the pipe
        exit_now(1)
    exit_now(0)

