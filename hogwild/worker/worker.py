"""The Hogwild worker process: take a batch, compute its gradient, update the shared parameters without locks.

Serves step 3 of `hogwild.train` (spawn): the process the engine spawns per device (sync.py in mode='sync').
One loop (`train_steps`) drives every Hogwild worker's step: a 'cpu' worker's in place on the shared parameters
(in_place.py), a device worker's on its replica (step_graph.py: prefetched pull, forward and backward, copy-out;
its frequent batch shapes captured as CUDA graphs with Config.graphs, run eagerly otherwise). The step never waits
for the device: its result is read by whoever applies its update (updates.py: at once, or on a device one step
later in a background thread while the next step computes). The steps' one backward() is gradients.forward_backward.
Everything a worker needs arrives once, pickled at spawn, in a `WorkerSpec` (process_prelude.py, which also runs the
process's prelude); afterwards a step exchanges no Python objects with other processes except a small ticket from
the feed queue.

Usage (engine.py): `ctx.Process(target=worker_main, args=(spec,)).start()`
"""
from __future__ import annotations

import gc
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..config import Config
from ..share.feed import PartitionReader, QueueReader
from ..shared_optim import FUSED_OPTIMIZERS, FUSED_WHEN_SHARED
from .capture import CaptureFailed, describe
from .gradients import NonFiniteStreak, batch_seed, compiled_loss, seed_batch
from .in_place import InPlaceStep
from .process_prelude import WorkerSpec, run_worker_process
from .replica import PageLocked, torch_device
from .step_graph import NotGraphable, StepGraphs, graph_shapes, shape_buckets, shape_counts
from .updates import SkipRule, Update, Updater, update_threads

Step = InPlaceStep | StepGraphs


def device_options(config: Config, device: str, optimizer: str) -> dict[str, bool]:
    """How a worker on `device` runs: overlap (update in a background thread), fused (CPU optimizer kernel),
    pin (register the shared storages page-locked). The automatic choices are on for GPUs only, except fused, also
    on for every worker when several step an optimizer of FUSED_WHEN_SHARED (unfused, their steps tear each other's
    moments); one worker keeps torch.optim's own unfused step."""
    cuda = device.startswith("cuda")
    overlap = device != "cpu" and (cuda if config.overlap_update is None else config.overlap_update)
    automatic = (cuda and optimizer in FUSED_OPTIMIZERS) or (config.workers > 1 and optimizer in FUSED_WHEN_SHARED)
    fused = automatic if config.fused_step is None else config.fused_step
    return {"overlap": overlap, "fused": fused, "pin": cuda and config.pin_shared}


def train_loop(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool]) -> None:
    """One worker's training: its step made (graphs captured) before ready, then the steps, then the last update."""
    config = spec.config
    view = reader.view
    options = device_options(config, spec.device, spec.optimizer.name)
    batches = spec.store.load()
    view.preparing()  # start-up's second part: bounded on its own, not by the time limit (parent_loop.py)
    step = make_step(spec, batches)  # captures before ready
    pinned = PageLocked(step.shared + step.shared_buffers) if options["pin"] else None  # pin: device workers
    try:
        spec.optimizer.attach(step.shared, fused=options["fused"])
        skip = SkipRule(view, spec.budget, NonFiniteStreak(spec.worker, config.max_nonfinite_in_a_row))
        updater = Updater(spec.optimizer, step.shared, config.schedule(), view, background=options["overlap"],
                          device=torch_device(spec.device), threads=update_threads(config, spec.device), skip=skip)
        try:
            if config.compile != "off":
                compile_every_shape(spec, stopped, step, batches)
            view.ready()
            train_steps(spec, reader, stopped, step, updater, batches)
            updater.finish()  # the last step's update lands before the worker reports it stopped
        finally:
            updater.shutdown()
    finally:
        if pinned is not None:
            pinned.close()


def make_step(spec: WorkerSpec, batches: list) -> Step:
    """The worker's step, prepared (start-up: before ready): in place for 'cpu', else on a device replica, its graphs
    captured when Config.graphed, their count and seconds reported (run_state). With 'auto', a step that cannot be
    graphed - it reads the device on the host, or its loss counts something else than the batch (NotGraphable) - or
    whose capture fails (capture.py undoes it: CaptureFailed) becomes the same step without graphs, with a warning
    naming why; with 'on' the worker fails, naming graphs='off'. Anything else ends the worker with its own text: an
    error of the loss or the model in the probe or the warm-up (the eager step would meet it too), a sticky CUDA
    error (capture.py raises it as itself: an empty_cache after it would hide it), a capture that cannot be undone
    (CaptureStuck)."""
    config, device = spec.config, torch_device(spec.device)
    loss_fn = compiled_loss(spec.loss_fn, config.compile)
    if spec.device == "cpu":
        return InPlaceStep(spec.model, loss_fn, config)
    if not config.graphed(spec.device):
        step = StepGraphs(spec.model, loss_fn, device, config, graphs=False)
        step.prepare(batches)
        return step
    view, began = spec.counters.worker_view(spec.worker), time.perf_counter()
    counts = shape_counts(batches)  # a BatchSet tells them: no batch built (a graph's capture builds one)
    step = StepGraphs(spec.model, loss_fn, device, config)
    try:
        count = step.prepare(batches, counts, graph_shapes(counts, config.graph_limit, config.epochs))
    except (NotGraphable, CaptureFailed) as error:
        reason = str(error).strip().splitlines()[0] if isinstance(error, NotGraphable) else \
            f"capturing the step failed ({describe(error.__cause__)})"
        if config.graphs == "on":
            raise RuntimeError(f"worker {spec.worker}: {reason}; train with graphs='off' (run.py --graphs off)") \
                from error
    else:
        view.graphs_captured(count, time.perf_counter() - began)
        return step
    del step  # here, not in the except block, whose traceback would keep its buffers and graph pool alive
    gc.collect()  # the error's frames hold the step in cycles: its graphs and pool give their memory back then
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # before the eager step is made; capture.py left no capture under way
    warnings.warn(f"worker {spec.worker}: {reason}; this worker runs the eager step", RuntimeWarning)
    step = StepGraphs(spec.model, loss_fn, device, config, graphs=False)
    step.prepare(batches, counts)
    view.graphs_captured(0, time.perf_counter() - began)
    return step


def compile_every_shape(spec: WorkerSpec, stopped: Callable[[], bool], step: Step, batches: list) -> None:
    """Config.compile: compile the step for every batch shape now, in start-up (before ready: outside the training
    clock, the time limit and the hang watch, inside the bound of preparing a step), one forward and backward each, no
    update. Workers after the first wait for it and then find its kernels in the run's inductor cache (in the batch
    store's scratch directory). Buffers that forward writes into the shared model (in place) are put back."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.path.dirname(spec.store.path), "inductor")
    while spec.worker and 0 in spec.counters.not_ready() and not stopped():
        time.sleep(0.05)  # worker 0 fills the cache first
    saved = [buffer.clone() for buffer in step.shared_buffers]
    for _, index in shape_buckets(shape_counts(batches)):  # one batch built per shape
        step.warm_up(batches[index])
    for shared, value in zip(step.shared_buffers, saved):
        shared.copy_(value)


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


def train_steps(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool], step: Step,
                updater: Updater, batches: list) -> None:
    """The loop of every Hogwild worker: nothing in it waits for the device but the hand-off of the previous update.
    Each step's parameters are prefetched once its ticket is known, while the previous step computes. Overlapped
    (a device worker's default on a GPU), the prefetch is issued beside the update in flight and does not wait for
    it: a torn read, as between Hogwild workers, counted as the updates that had landed when it was issued."""
    config, view = spec.config, reader.view
    deadline = spec.control.wait_for_start(stopped, config.time_limit)
    overlap = updater.executor is not None
    idle = updater.finish if overlap else None  # no ticket at hand: land the held update
    count_eager = config.graphed(spec.device)  # steps without a graph (every step after a failed capture)
    steps = 0
    ticket = next_ticket(spec, reader, stopped, deadline, idle)
    batch = _prefetch(step, view, config, steps, batches, ticket)  # the first step's batch and parameters
    while ticket is not None:
        epoch, index = ticket
        seed_batch(step.device, batch_seed(config.seed, epoch, index))
        clock = step.clocks[steps % 2]  # read by whoever applies the update, maybe one step late
        clock.mark()
        read_version = step.pull.make_current()  # prefetched while the previous step computed
        clock.mark()
        if overlap:
            updater.release()  # the held update lands beside this step and the next prefetch (neither waits for it)
        result = step.run(batch, steps % 2, clock)  # forward, backward, clip, copy-out: queued, no wait
        if result.eager and count_eager:
            view.eager_step()
        steps += 1
        reader.done()
        # serial: lands now, and the next pull sees it (the paper's order); overlapped: held until the next step starts
        updater.submit(Update(None, read_version, epoch, result.count, 0.0, [], result=result))
        ticket = next_ticket(spec, reader, stopped, deadline, idle)
        batch = _prefetch(step, view, config, steps, batches, ticket)  # overlapped: beside the update in flight
        if overlap:
            updater.wait()  # one update at a time: the previous one has landed (and left its host slot)
        if ticket is None:
            ticket = _after_last(spec, reader, stopped, deadline, updater, step)
            batch = _prefetch(step, view, config, steps, batches, ticket)


def _prefetch(step: Step, view, config: Config, steps: int, batches: list, ticket: tuple[int, int] | None) -> Any:
    """Start pulling the parameters of `ticket`'s step (the dense ones every Config.pull_every steps, the sparse rows
    of its batch every step), counted as the global updates landed now; returns its batch (None without a ticket),
    which the step then trains on: read once, as a Dataset's batch is built when indexed."""
    if ticket is None:
        return None
    batch = batches[ticket[1]]
    step.pull.prefetch(view.global_updates() if steps % config.pull_every == 0 else None, batch)
    return batch


def _after_last(spec: WorkerSpec, reader: QueueReader | PartitionReader, stopped: Callable[[], bool],
                deadline: float | None, updater: Updater, step: Step) -> tuple[int, int] | None:
    """No ticket: land the last update; a late skip gives its max_steps slot back, which may allow one more step."""
    updater.finish()
    ticket = next_ticket(spec, reader, stopped, deadline) if spec.budget is not None else None
    if ticket is None:
        step.pull.finish()  # the last step's buffers have reached the shared model
    return ticket


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
