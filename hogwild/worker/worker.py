"""The Hogwild worker process: take a batch, compute its gradient, update the shared parameters without locks.

Serves step 3 of `hogwild.train` (spawn): the process the engine spawns per device (sync.py in mode='sync').
This is the only code (with sync.py, its synchronous twin) that calls backward(); the optimizer step it submits
is applied by updates.py (at once, or on a device one step later in a background thread while the next step
computes). A step reads the device once: the gradients' finiteness (or norm) and the loss in one transfer
(gradients.py). A graphed worker (Config.graphs, step_graph.py) runs `train_graphed_steps` instead: its step never
reads the device, its pull is prefetched while the previous step computes, and its update is read one step late by
the update thread. Everything a worker needs arrives once, pickled at spawn, in a `WorkerSpec`
(process_prelude.py, which also runs the process's prelude); afterwards a step exchanges no Python objects with
other processes except a small ticket from the feed queue.

Usage (engine.py): `ctx.Process(target=worker_main, args=(spec,)).start()`
"""
from __future__ import annotations

import functools
import gc
import os
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from ..config import Config
from ..share.run_state import PhaseClock
from ..share.feed import PartitionReader, QueueReader
from ..shared_optim import FUSED_OPTIMIZERS
from .gradients import GradientCheck, NonFiniteStreak, batch_seed, call_loss, compiled_loss, gradient_stats, seed_batch
from .capture import CaptureFailed, describe
from .process_prelude import WorkerSpec, run_worker_process
from .replica import DeviceReplica, PageLocked, SharedParameters, make_parameters, move_batch, torch_device
from .step_graph import NotGraphable, StepGraphs, shape_buckets
from .updates import SkipRule, Update, Updater, update_threads


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
    batches = spec.store.load()
    graphed = graphed_step(spec, batches) if config.graphed(spec.device) else None  # captures before ready
    params = graphed.pull if graphed is not None else make_parameters(
        spec.model, spec.device, buffer_sets=2 if options["overlap"] else 1, sparse_rows=config.sparse_pull)
    pinned = PageLocked(params.shared + params.shared_buffers) if options["pin"] else None  # pin: device workers
    try:
        spec.optimizer.attach(params.shared, fused=options["fused"])
        skip = SkipRule(view, spec.budget, NonFiniteStreak(spec.worker, config.max_nonfinite_in_a_row))
        updater = Updater(spec.optimizer, params.shared, config.schedule(), view, background=options["overlap"],
                          device=torch_device(spec.device), threads=update_threads(config, spec.device), skip=skip)
        try:
            step_loss = compiled_loss(spec.loss_fn, config.compile)
            if config.compile != "off":
                compile_every_shape(spec, stopped, params, step_loss, batches)
            view.ready()
            if graphed is not None:
                train_graphed_steps(spec, reader, stopped, graphed, updater, batches)
            else:
                train_steps(spec, reader, stopped, params, updater, batches, skip, step_loss)
            updater.finish()  # the last step's update lands before the worker reports it stopped
        finally:
            updater.shutdown()
    finally:
        if pinned is not None:
            pinned.close()


def graphed_step(spec: WorkerSpec, batches: list) -> StepGraphs | None:
    """The worker's graphed step, its graphs captured (start-up: before ready); None when Config.graphs is 'auto' and
    the step cannot be captured: it reads the device on the host (NotGraphable), the loss or model is one it cannot
    take (ValueError), or the capture itself fails (capture.py undoes it: CaptureFailed). The eager step then runs,
    with a warning naming why; with 'on' the worker fails, naming graphs='off'. A capture that cannot be undone
    (CaptureStuck) fails the worker either way."""
    step = StepGraphs(spec.model, spec.loss_fn, torch_device(spec.device), spec.config)
    try:
        count = step.prepare(batches)
    except (RuntimeError, ValueError) as error:  # NotGraphable, a loss or model the step cannot take, CaptureFailed
        reason = str(error).strip().splitlines()[0] if isinstance(error, NotGraphable) else \
            f"capturing the step failed ({describe(error.__cause__ if isinstance(error, CaptureFailed) else error)})"
        if spec.config.graphs == "on":
            raise RuntimeError(f"worker {spec.worker}: {reason}; train with graphs='off' (run.py --graphs off)") \
                from error
    else:
        spec.counters.worker_view(spec.worker).graphs_captured(count)
        return step
    del step  # here, not in the except block, whose traceback would keep its buffers and graph pool alive
    gc.collect()  # the error's frames hold the step in cycles: its graphs give their pool back when collected
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # before the eager replica is made; capture.py left no capture under way
    warnings.warn(f"worker {spec.worker}: {reason}; this worker runs the eager step", RuntimeWarning)
    return None


def compile_every_shape(spec: WorkerSpec, stopped: Callable[[], bool], params: SharedParameters | DeviceReplica,
                        step_loss: Callable, batches: list) -> None:
    """Config.compile: compile the step for every batch shape now, in start-up (before ready: outside the training
    clock and the hang watch, inside the parent's start-up bound), one forward and backward each, no update. Workers
    after the first wait for it and then find its kernels in the run's inductor cache (in the batch store's scratch
    directory). Buffers that forward writes are put back, gradients dropped."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.path.dirname(spec.store.path), "inductor")
    while spec.worker and 0 in spec.counters.not_ready() and not stopped():
        time.sleep(0.05)  # worker 0 fills the cache first
    device = params.device
    buffers = [buffer.clone() for buffer in params.shared_buffers] if device.type == "cpu" else []
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if spec.config.amp == "bf16" else nullcontext()
    for _, index in shape_buckets(batches):
        net = params.pull(batches[index])
        batch = batches[index] if device.type == "cpu" else move_batch(batches[index], device)
        with autocast:
            loss, _ = call_loss(step_loss, net, batch)
        loss.backward()
        params.clear()
    for shared, saved in zip(params.shared_buffers, buffers):
        shared.copy_(saved)


def next_ticket(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                deadline: float | None, idle: Callable[[], None] | None = None) -> tuple[int, int] | None:
    """The next (epoch, batch index) to train, with its max_steps slot claimed (partition mode; the queue's dealer
    deals exactly max_steps); None once the run is over for this worker (stop, deadline, budget spent, no batch
    left). idle(): the reader calls it before it waits for a ticket (an overlapped worker lands its held update)."""
    budget = spec.budget  # None without max_steps; a claimed slot also covers an update still in flight
    if stopped() or (deadline is not None and time.time() >= deadline):
        return None
    if budget is not None and not budget.claim():  # an update slot, so that max_steps is exact
        return None
    ticket = reader.next(idle)
    if ticket is None and budget is not None:
        budget.release()
    return ticket


def train_steps(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                params: SharedParameters | DeviceReplica, updater: Updater, batches: Any, skip: SkipRule,
                step_loss: Callable) -> None:
    config, view = spec.config, reader.view
    deadline = spec.control.wait_for_start(stopped, config.time_limit)
    # Without clipping, finiteness is checked by hooks during backward; clipping computes the norm anyway.
    check = GradientCheck(params.grad_params) if config.skip_nonfinite and config.clip_norm is None else None
    clock, device = PhaseClock(params.device), params.device
    overlap = updater.executor is not None  # 'cpu' workers never hold an update back: skip its hand-offs per step
    idle = updater.finish if overlap else None  # no ticket at hand: land the update held back before waiting
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if config.amp == "bf16" else nullcontext()
    eager = config.graphed(spec.device)  # a graphed worker whose capture failed: every step counts as eager
    steps = read_version = 0  # read_version: the global update count at the last pull of the dense parameters
    while (ticket := next_ticket(spec, reader, stopped, deadline, idle)) is not None:
        epoch, index = ticket
        batch = batches[index] if device.type == "cpu" else move_batch(batches[index], device, True)
        seed_batch(device, batch_seed(config.seed, epoch, index))
        dense = steps % config.pull_every == 0  # else the replica keeps its dense parameters (and their age)
        steps += 1
        if eager:
            view.eager_step()
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
            skip.applied()
        else:
            clock.seconds()
            skip.skipped()
        params.clear()
        reader.done()


def train_graphed_steps(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                        step: StepGraphs, updater: Updater, batches: Any) -> None:
    """The graphed worker's loop: nothing in it waits for the device but the hand-off of the previous update."""
    config, view = spec.config, reader.view
    deadline = spec.control.wait_for_start(stopped, config.time_limit)
    overlap = updater.executor is not None
    idle = functools.partial(_land_held, updater, step) if overlap else None  # no ticket: land the held update
    step.pull.prefetch(view.global_updates())  # the first step's parameters
    steps = 0
    while (ticket := next_ticket(spec, reader, stopped, deadline, idle) or _after_last(spec, reader, stopped, deadline,
                                                                                  updater, step)) is not None:
        epoch, index = ticket
        seed_batch(step.device, batch_seed(config.seed, epoch, index))
        clock = step.clocks[steps % 2]  # read by the update thread one step late
        clock.mark()
        read_version = step.pull.make_current()  # prefetched while the previous step computed
        clock.mark()
        if overlap:
            updater.release(step.pull.event)  # the held update may land once the prefetch has read the parameters
        result = step.run(batches[index], steps % 2, clock)  # forward, backward, clip, copy-out: queued, no wait
        if result.eager:
            view.eager_step()
        if overlap:
            updater.wait()  # the previous update has landed: the prefetch below sees it
        updater.submit(Update(None, read_version, epoch, result.count, 0.0, [], result=result))  # serial: lands now
        steps += 1
        if steps % config.pull_every == 0:
            step.pull.prefetch(view.global_updates())  # the next step's parameters, while this one computes
        reader.done()


def _after_last(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                deadline: float | None, updater: Updater, step: StepGraphs) -> tuple[int, int] | None:
    """No ticket: land the last update; a late skip gives its max_steps slot back, which may allow one more step."""
    _land_held(updater, step)
    ticket = next_ticket(spec, reader, stopped, deadline) if spec.budget is not None else None
    if ticket is None:
        step.pull.finish()  # the last step's buffers have reached the shared model
    return ticket


def _land_held(updater: Updater, step: StepGraphs) -> None:
    """Land the update held back, once the prefetch in flight has read the shared parameters (its event): it must
    not write them under that copy, or the next step would train a torn mix of two versions."""
    updater.release(step.pull.event)
    updater.finish()


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
