"""The Hogwild worker process: take a batch, compute its gradient, update the shared parameters without locks.

Serves step 3 of `hogwild.train` (spawn): the process the engine spawns per device (sync.py in mode='sync').
This is the only code (with sync.py, its synchronous twin) that calls backward(); the optimizer step it submits
is applied by updates.py (at once, or on a device one step later in a background thread while the next step
computes). A step reads the device once: the gradients' finiteness (or norm) and the loss in one transfer
(gradients.py). Everything a worker needs arrives once, pickled at spawn, in a `WorkerSpec`
(process_prelude.py, which also runs the process's prelude); afterwards a step exchanges no Python objects with
other processes except a small ticket from the feed queue.

Usage (engine.py): `ctx.Process(target=worker_main, args=(spec,)).start()`
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from ..config import Config
from ..share.run_state import PhaseClock
from ..share.feed import PartitionReader, QueueReader
from ..shared_optim import FUSED_OPTIMIZERS
from .gradients import GradientCheck, NonFiniteStreak, batch_seed, call_loss, compiled_loss, gradient_stats, seed_batch
from .process_prelude import WorkerSpec, run_worker_process
from .replica import DeviceReplica, PageLocked, SharedParameters, make_parameters, move_batch
from .updates import Update, Updater, update_threads


def device_options(config: Config, device: str, optimizer: str) -> dict[str, bool]:
    """How a worker on `device` runs: overlap (update in a background thread), fused (CPU optimizer kernel),
    pin (register the shared storages page-locked). The automatic choices are on for GPUs only."""
    cuda = device.startswith("cuda")
    overlap = device != "cpu" and (cuda if config.overlap_update is None else config.overlap_update)
    fused = (cuda and optimizer in FUSED_OPTIMIZERS) if config.fused_step is None else config.fused_step
    return {"overlap": overlap, "fused": fused, "pin": cuda and config.pin_shared}


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
        updater = Updater(spec.optimizer, params.shared, config.schedule(), view, background=options["overlap"],
                          device=params.device, threads=update_threads(config, spec.device))
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
    idle = updater.finish if overlap else None  # no ticket at hand: land the update held back before waiting
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if config.amp == "bf16" else nullcontext()
    step_loss = compiled_loss(spec.loss_fn, config.compile)
    steps = read_version = 0  # read_version: the global update count at the last pull of the dense parameters
    while not stopped():
        if deadline is not None and time.time() >= deadline:
            break
        if budget is not None and not budget.claim():  # an update slot, so that max_steps is exact
            break
        ticket = reader.next(idle)
        if ticket is None:
            if budget is not None:
                budget.release()
            break
        epoch, index = ticket
        batch = batches[index] if device.type == "cpu" else move_batch(batches[index], device, True)
        seed_batch(device, batch_seed(config.seed, epoch, index))
        dense = steps % config.pull_every == 0  # else the replica keeps its dense parameters (and their age)
        steps += 1
        if dense:
            read_version = view.global_updates()
        clock.mark()
        net = params.pull(batches[index], dense)  # a replica: host->device copies; 'cpu': the shared model itself
        clock.mark()
        if overlap:
            updater.release(clock.events[1] if clock.cuda else None)  # the previous update may now land
        with autocast:
            loss, examples = call_loss(step_loss, net, batch)  # reads the (shared) parameters
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


def worker_main(spec: WorkerSpec) -> None:
    """Process entry point (process_prelude.py runs the prelude and reports a failure to the parent)."""
    run_worker_process(spec, lambda stopped: _read_and_train(spec, stopped))


def _read_and_train(spec: WorkerSpec, stopped: Callable[[], bool]) -> None:
    """Train on the tickets of the feed queue, or on this worker's own shard in partition mode."""
    config, view = spec.config, spec.counters.worker_view(spec.worker)
    if spec.tickets is None:
        epoch, position = spec.partition_start
        reader = PartitionReader(spec.store.length, config.workers, spec.worker, config.epochs, config.seed,
                                 config.shuffle, stopped, view, epoch, position)
    else:
        reader = QueueReader(spec.tickets, stopped, view)
    train_loop(spec, reader, stopped)
