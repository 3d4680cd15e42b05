"""`hogwild.train`: validate, share the model, spawn the workers, supervise them, and return the result.

Usage: `result = hogwild.train(model, loss_fn, batches, hogwild.Config(workers=2, lr=0.1), evaluate=evaluate)`

This file holds only the five steps; each module under it says in its docstring which step it serves:
1. validate  the arguments here; config.py; share/resources.py, share/checkpoint.py (a resumed last.pt, checked
             before anything is written)
2. share     share/ (shared_run.py's `share`: shared model and optimizer state, the run state, the resumed run)
3. spawn     feed/ (batch_store.py in scratch.py's folder; tickets.py, or stream.py for a stream); the processes
             started by worker/start_method.py (forked from fork_server.py's server, which ran
             forkserver_preload.py, or spawned); in each process worker/ (process_prelude.py, then worker.py or
             sync.py; the step: in_place.py, or device_step.py with pull.py, copy_out.py, capture.py; gradients.py,
             replica.py, updates.py)
4. supervise parent/ (parent_loop.py with supervisor.py, metrics.py, evaluation.py, checkpoints and an agent.py agent);
             process_signals.py (a signal to the process group stops the run gracefully)
5. result    the final evaluation and last.pt, then a TrainResult
"""
from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ._lifeline import WORKER_NAMES
from .config import Config
from .feed.batch_store import BatchStore, opens_in_worker
from .feed.scratch import make_scratch, remove_scratch
from .feed.stream import ArrivingBatches, StreamFeed, is_streamed
from .feed.tickets import BatchFeed, as_sequence
from .parent.agent import AttachedAgent, CommunicationAgent, SharedTrainingState
from .parent.evaluation import EvaluationFailed, Evaluator, PeriodicEvaluation
from .parent.metrics import MetricsLog, eager_share
from .parent.parent_loop import ParentLoop, natural_reason, start_workers, total_updates
from .parent.supervisor import Supervisor, WorkerFailed
from .process_signals import graceful_signals, start_resource_tracker
from .share.checkpoint import load_resume_state, prepare_run_dir
from .share.resources import tensor_nbytes
from .share.run_state import RunControl, StepBudget
from .share.shared_run import SharedRun, share
from .shared_optim import trainable_parameters
from .worker.process_prelude import WorkerSpec
from .worker.replica import sparse_tables
from .worker.start_method import inherited, launcher_pid, requested_method, worker_context
from .worker.worker import worker_main


@dataclass
class TrainResult:
    """What a run produced. Metrics dicts are evaluate()'s output; counts include resumed runs."""

    final_metrics: dict[str, float] | None  # evaluation of the final parameters (None without evaluate)
    best_metrics: dict[str, float] | None  # best evaluation by Config.best_metric
    best_step: int | None  # global update count of the best evaluation
    history: list[dict[str, Any]]  # every evaluation: {"updates", "final", **metrics}
    updates: int  # shared updates applied (global step)
    wall_seconds: float  # this call's training time
    worker_updates: list[int]  # per worker
    examples: int  # examples (or tokens) trained on
    final_loss: float | None  # mean training loss over the last logging interval
    staleness_mean: float
    staleness_histogram: list[int]  # [i] = updates with staleness i; the last bin counts >= len - 1
    skipped_updates: int  # non-finite gradients skipped
    phase_ms: dict[str, float]  # mean ms per update: pull (host->device), compute, push (device->host), update
    stop_reason: str  # 'epochs' | 'max_steps' | 'time_limit' | 'early_stopping' | 'target' | 'signal SIGINT' | ...
    run_dir: str | None = None
    checkpoint: str | None = None  # last.pt
    best_checkpoint: str | None = None  # best.pt
    records: list[dict[str, Any]] = field(default_factory=list)  # the 'train' metrics records of this call
    graphs: int = 0  # CUDA graphs the workers captured (Config.graphs; on 'cpu-replica': static-input shapes)
    eager_steps: int = 0  # steps of graphed workers run eagerly: no graph for the batch shape, or the capture failed
    eager_share: float | None = None  # eager_steps over the graphed workers' steps (None: no graphed worker)
    restarts: int = 0  # workers replaced after dying or hanging (Config.max_restarts)
    late_signal: str | None = None  # 'signal SIGTERM': the run's first signal came after training ended (its stop,
    # final evaluation and last.pt went on): the run is whole, and a caller may skip what it would do next


def train(model: nn.Module, loss_fn: Callable, batches: Sequence | Iterable, config: Config,
          evaluate: Callable[..., dict[str, float]] | None = None, *,
          agent: CommunicationAgent | None = None) -> TrainResult:
    """Train `model` with lock-free asynchronous workers (or synchronously, per `config.mode`).

    model: an nn.Module on the CPU (workers place replicas on config.devices). Its parameters that require grad
    are trained, a tied one (one Parameter in two modules) once per step; frozen ones (requires_grad=False) are
    shared and checkpointed but get no gradient, optimizer state or update; buffers of any dtype are shared and
    checkpointed, and what forward writes into them reaches the shared model. loss_fn(model, batch) -> scalar
    loss or (loss, n_tokens_or_examples); must be picklable (a module-level function). batches: CPU batches -
    tensors, tuples or dicts of tensors - as a sequence or a map-style Dataset (stored, indexed in each worker), or
    any other iterable (streamed to the workers as they train: an IterableDataset, a generator; an epoch is one
    pass; feed/stream.py). evaluate(model) -> dict of metrics,
    or evaluate(model, final) (final=False: periodic check, True: the run's last evaluation), run in this process
    on a snapshot, on a thread beside the parent's loop (evaluation.py). Raises WorkerFailed when a worker fails and
    EvaluationFailed when evaluate raises, both after writing last.pt.
    """
    stream = batches if is_streamed(batches) else None  # read by the feed as the workers train, never listed
    batches = _validate(model, batches, config, stream is not None)
    saved = load_resume_state(config, model, len(batches))  # checked before the run directory is written
    run_dir = prepare_run_dir(config)
    held = 0 if opens_in_worker(batches) else tensor_nbytes(list(batches))  # a Dataset is indexed in each worker
    shared = share(model, config, saved, run_dir, len(batches), held)
    scratch = make_scratch()  # and removes the scratch folders of runs killed with kill -9
    metrics = feed = None
    try:
        start_resource_tracker()  # before the feed's first queue starts it: a closed terminal must not end it
        store = BatchStore(batches, scratch)
        ctx = worker_context(config, agent is not None, model, shared.optimizer)  # a fork server or spawn
        if stream is not None:
            feed = StreamFeed(ctx, stream, config.workers, config.epochs, config.queue_depth, shared.counters,
                              shared.start.seq, config.max_steps)
        elif config.data_assignment == "queue" and config.mode != "sync":
            feed = BatchFeed(ctx, len(batches), config.workers, config.epochs, config.seed, config.shuffle,
                             config.queue_depth, shared.counters, shared.start.seq, config.max_steps)
        if feed is not None:
            shared.checkpoints.queue_position = feed.resume_seq
        supervisor = _spawn(ctx, shared, model, loss_fn, store, feed, scratch)
        graphed = [worker for worker, device in enumerate(config.devices) if config.graphed(device)]
        metrics = MetricsLog(run_dir, config.workers, total_updates(config, len(batches)), config.progress,
                             config.tensorboard, shared.counters.snapshot(), graphed)
        # from the first worker to last.pt: SIGINT/SIGTERM/SIGHUP request a graceful stop, and a repeated one
        # (a second Ctrl-C) does not abort the stop: the checkpoint is written all the same
        late: list[str] = []  # the signals that came once the stop was under way
        with graceful_signals(functools.partial(_stop_on_signal, shared.control, late)):
            run = _supervise(shared, supervisor, metrics, store, feed, evaluate, agent)
            result = _result(shared, run, metrics, supervisor)
        if late and not result.stop_reason.startswith("signal"):
            result.late_signal = f"signal {late[0]}"  # the first signal the run received, after training ended
        return result
    finally:
        if feed is not None:
            feed.close()  # again (it is idempotent) for a start-up that failed before supervising
        if metrics is not None:
            metrics.close()
        remove_scratch(scratch)


def _stop_on_signal(control: RunControl, late: list[str], name: str) -> None:
    """A signal stops training; one that comes once the stop is under way (training reached its end, or an earlier
    signal stopped it) changes nothing here but is kept (TrainResult.late_signal); only a repeated one is "again"."""
    if not control.stopping:
        control.request_stop(f"signal {name}")
        return
    if late or str(control.stop_reason).startswith("signal"):
        print(f"hogwild: {name} again: already stopping; last.pt is being written, a moment", file=sys.stderr,
              flush=True)
    late.append(name)


def _validate(model: nn.Module, batches: Sequence | Iterable, config: Config, streamed: bool) -> Sequence:
    """The batches the workers' store holds: the batches themselves, or for a stream ArrivingBatches (each comes with
    its ticket)."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a hogwild.Config, got {type(config).__name__}")
    requested_method()  # $HOGWILD_START_METHOD, refused before anything is written
    if any(t.device.type != "cpu" for t in model.state_dict().values()):
        raise ValueError("model must be on the CPU: the parent keeps the shared copy; workers put replicas on "
                         "Config.devices")
    if not trainable_parameters(model):
        raise ValueError("model has no parameter with requires_grad=True: every parameter is frozen, nothing to train")
    if streamed:
        _check_streamable(model, config)
        return ArrivingBatches()
    batches = as_sequence(batches)
    if config.data_assignment == "partition" and len(batches) < config.workers:
        raise ValueError(f"Config.data_assignment='partition' needs at least one batch per worker: "
                         f"{len(batches)} batches for {config.workers} workers")
    return batches


def _check_streamable(model: nn.Module, config: Config) -> None:
    """What a stream of batches (an iterable that cannot be indexed) cannot do: the workers see no batch before its
    ticket, so nothing that scans every batch at start-up, and only the feed's queues carry it."""
    why = None
    if config.mode == "sync" or config.data_assignment == "partition":
        why = (f"Config.{'mode' if config.mode == 'sync' else 'data_assignment'}="
               f"{config.mode if config.mode == 'sync' else 'partition'!r} indexes the batches in each worker; a "
               f"stream goes through the feed's queues (mode='hogwild' or 'single', data_assignment='queue')")
    elif config.graphs == "on":
        why = "Config.graphs='on' captures every batch shape at start-up, before any batch of a stream exists"
    elif config.compile != "off":
        why = "Config.compile compiles every batch shape at start-up, before any batch of a stream exists"
    elif sparse_tables(model) and any(device != "cpu" for device in config.devices):
        why = ("a device worker's sparse embedding tables are sized by the largest batch's ids, which a stream does "
               "not know ahead; train on 'cpu' workers, or with dense embeddings")
    if why:
        raise ValueError(f"batches is a stream (an iterable that cannot be indexed: an IterableDataset, a generator, "
                         f"a DataLoader): {why}. A list or a map-style Dataset of the batches can be indexed")


def _spawn(ctx, shared: SharedRun, model: nn.Module, loss_fn: Callable, store: BatchStore, feed: BatchFeed | None,
           scratch: str) -> Supervisor:
    """One process per device (not started yet): Hogwild workers, or synchronous ones in sync mode; and how to
    replace one (Config.max_restarts): the same WorkerSpec with a new queue from the feed, which deals the batches
    the dead one had not finished again."""
    config, counters = shared.config, shared.counters
    budget = None  # queue mode: the feed deals exactly max_steps batches
    if config.max_steps and feed is None:
        budget = StepBudget(ctx, config.max_steps, counters.global_updates())
    shared.budget = budget  # Process.start() drops its args: without this reference the lock would be unlinked

    def process(w: int) -> Any:
        spec = WorkerSpec(worker=w, device=config.devices[w], config=config, model=model, loss_fn=loss_fn,
                          optimizer=shared.optimizer, store=store, counters=counters, control=shared.control,
                          tickets=feed.mailbox(w) if feed else None,
                          error_file=Supervisor.error_file(scratch, w), parent_pid=launcher_pid(ctx),
                          budget=budget, partition_start=shared.start.partitions[w], start_seq=shared.start.seq,
                          inherited=inherited(ctx))
        if config.mode == "sync":
            from .worker.sync import sync_main
            init = f"file://{os.path.join(scratch, 'rendezvous')}"
            return ctx.Process(target=sync_main, args=(spec, init), name=f"{WORKER_NAMES[1]}{w}")
        return ctx.Process(target=worker_main, args=(spec,), name=f"{WORKER_NAMES[0]}{w}")

    def respawn(w: int) -> Any:  # worker w's process is dead and reaped
        feed.reassign(w)
        counters.restarting(w)
        return process(w)

    return Supervisor([process(w) for w in range(config.workers)], scratch, config.devices,
                      respawn if feed is not None else None)


@dataclass
class _Run:
    """How the supervised part of a run ended."""

    failure: str | None
    records: list[dict[str, Any]]
    started: float  # time.time() when training started (every worker ready)
    deadline: float | None
    stop_reason: str | None
    evaluator: Evaluator | None
    periodic: PeriodicEvaluation | None  # None when training never started
    evaluation_error: EvaluationFailed | None  # a periodic evaluation failed (failure holds its message)


def _supervise(shared: SharedRun, supervisor: Supervisor, metrics: MetricsLog, store: BatchStore,
               feed: BatchFeed | None, evaluate: Callable | None, agent: CommunicationAgent | None) -> _Run:
    """Start the workers, run the parent's loop until training ends, then stop every worker (and the agent)."""
    config, control, checkpoints = shared.config, shared.control, shared.checkpoints
    attached = None
    if agent is not None:
        attached = AttachedAgent(agent, SharedTrainingState(shared.model, shared.optimizer, shared.counters, control,
                                                            config, control.request_stop))
        metrics.extra = attached.report
    loop = ParentLoop(shared, supervisor, metrics, attached, feed.waiting if feed is not None else None)
    evaluator, periodic, evaluation_error, failure, records = None, None, None, None, []
    if attached is not None:
        attached.start()
    start_workers(supervisor)
    # After spawning: a GPU evaluation snapshot must not initialise CUDA before the workers exist.
    if evaluate is not None:
        evaluator = Evaluator(shared.model, evaluate, config, checkpoints.save_best)
        checkpoints.evaluator_state = evaluator.state_dict
        saved = checkpoints.resumed_evaluator
        if saved:
            evaluator.load_state_dict(saved)
    if feed is not None:  # a stream whose iterator raises stops the run, named below
        feed.start(lambda: control.stopping, lambda: control.request_stop("the batches failed"))
    started, deadline = time.time(), None
    try:
        failure = loop.wait_until_ready()
        if failure is None and control.stop_reason is None:
            started = time.time()  # the clock starts when every worker is ready to train
            deadline = started + config.time_limit if config.time_limit else None
            if evaluator is not None:
                periodic = PeriodicEvaluation(evaluator, config, shared.counters.global_updates())
                periodic.maybe_start(shared.counters.global_updates())  # eval_at_start: before any update
            control.mark_started(started)
            metrics.training_started(started)
            if not config.max_restarts:  # a replacement maps the batches again: keep them until the end then
                store.remove()  # every worker is ready, the batches mapped: nothing to leak on disk
            try:
                failure, records = loop.run(periodic, deadline)
            except EvaluationFailed as error:
                evaluation_error, failure = error, str(error)
    finally:
        # Workers that never started training have no step to finish: do not wait join_timeout for them.
        supervisor.stop(control, config.join_timeout if control.started else min(config.join_timeout, 1.0))
        if failure is None and evaluation_error is None:  # a worker that raised while finishing its last step
            failure = supervisor.failure()
        if feed is not None:
            feed.close()
            if feed.error and failure is None:
                failure = f"reading the batches failed (their iterator raised):\n{feed.error}"
        if attached is not None:
            attached.stop(failure)
            failure = failure or attached.failure()  # its closing exchanges failed (e.g. a peer died meanwhile)
    return _Run(failure, records, started, deadline, control.stop_reason, evaluator, periodic, evaluation_error)


def _final_evaluation(run: _Run, metrics: MetricsLog, updates: int) -> dict[str, float]:
    """Record a periodic evaluation still running when training ended (it is bounded by evaluate itself; the
    workers have stopped), then evaluate the final parameters. Raises EvaluationFailed."""
    if run.periodic is not None:
        done = run.periodic.finish()
        if done is not None:
            metrics.evaluation(*done)
    try:
        final_metrics = run.evaluator(updates, final=True)
    except Exception as error:
        raise EvaluationFailed(f"evaluate() failed in the final evaluation at update {updates}: "
                               f"{type(error).__name__}: {error}") from error
    metrics.evaluation(updates, final_metrics, final=True)
    return final_metrics


def _result(shared: SharedRun, run: _Run, metrics: MetricsLog, supervisor: Supervisor) -> TrainResult:
    """The final evaluation and last.pt, then the TrainResult (or WorkerFailed / EvaluationFailed after the
    checkpoint)."""
    config, evaluator, checkpoints = shared.config, run.evaluator, shared.checkpoints
    if run.failure and run.periodic is not None:
        run.periodic.abandon()  # no one reads it now; left running, it would abort the process at its exit
    wall = time.time() - run.started
    snapshot = shared.counters.snapshot()
    run.records.append(metrics.record(snapshot))
    updates = snapshot.updates()
    reason = "failure" if run.failure else run.stop_reason or natural_reason(config, updates, run.deadline)
    metrics.event("stop", reason=reason, updates=updates, failure=run.failure)
    final_metrics, evaluation_error = None, run.evaluation_error
    if evaluator is not None and not run.failure:
        # last.pt now, and again after the final evaluation, which it records: a signal during that evaluation (a
        # closed terminal, run.py's SIGTERM) must not lose the training since the last periodic checkpoint
        checkpoints.write_last()
        try:
            final_metrics = _final_evaluation(run, metrics, updates)
        except EvaluationFailed as error:
            evaluation_error = error
    checkpoints.write_last()
    last = checkpoints.last
    written = f"\ncheckpoint written to {last}" if last else ""
    if evaluation_error is not None:
        raise EvaluationFailed(f"training stopped: {evaluation_error}{written}", last) from evaluation_error.__cause__
    if run.failure:
        raise WorkerFailed(f"training stopped: {run.failure}{written}", supervisor.failed_worker, last)
    staleness_mean, histogram = snapshot.staleness_summary()
    return TrainResult(
        final_metrics=final_metrics, best_metrics=evaluator.best_metrics if evaluator else None,
        best_step=evaluator.best_step if evaluator else None,
        history=evaluator.history if evaluator else [], updates=updates, wall_seconds=wall,
        worker_updates=snapshot.worker_updates(), examples=snapshot.examples(), final_loss=metrics.last_loss,
        staleness_mean=staleness_mean, staleness_histogram=histogram,
        skipped_updates=snapshot.skipped(), stop_reason=reason, run_dir=checkpoints.run_dir,
        phase_ms=snapshot.phase_milliseconds(),
        checkpoint=last, best_checkpoint=checkpoints.best_path(), records=run.records,
        graphs=snapshot.graphs(), eager_steps=snapshot.eager_steps(),
        eager_share=eager_share(snapshot, metrics.graphed),
        restarts=supervisor.restarts)
