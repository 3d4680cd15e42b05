"""`hogwild.train`: share the model, spawn the workers, and run the parent's loop (progress, metrics,
evaluation, checkpoints, stop conditions, failures) until training ends.

Usage: `result = hogwild.train(model, loss_fn, batches, hogwild.Config(workers=2, lr=0.1), evaluate=evaluate)`
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
from torch import nn

from .agent import CommunicationAgent, SharedTrainingState
from .checkpoint import build_checkpoint, load_checkpoint, restore_model, restore_rng_states, save_checkpoint
from .config import Config
from .counters import EXAMPLES, READY, SKIPPED, UPDATES, SharedCounters
from .evaluator import Evaluator
from .feed import BatchFeed, BatchStore, as_sequence, partition_positions, resume_seq
from .metrics import MetricsLog, phase_milliseconds, staleness_summary
from .supervisor import Supervisor, WorkerFailed, check_shared_memory, graceful_signals
from .worker import START, WorkerSpec, worker_main

_TICK = 0.1  # seconds between the parent's checks
_START_TIMEOUT = 600.0  # seconds for spawned workers to import torch, unpickle the model and map the batches


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
    stop_reason: str  # 'epochs' | 'max_steps' | 'time_limit' | 'early_stopping' | 'signal SIGINT' | ...
    run_dir: str | None = None
    checkpoint: str | None = None  # last.pt
    best_checkpoint: str | None = None  # best.pt
    records: list[dict[str, Any]] = field(default_factory=list)  # the 'train' metrics records of this call


def _model_nbytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values() if not t.is_shared())


def _prepare_run_dir(config: Config) -> str | None:
    if config.checkpoint_dir is None:
        return None
    os.makedirs(config.checkpoint_dir, exist_ok=True)
    path = os.path.join(config.checkpoint_dir, "config.json")
    values = {}
    if os.path.exists(path):  # keep sections others wrote there (e.g. run.py's options)
        try:
            with open(path) as file:
                values = json.load(file)
        except (OSError, ValueError):
            values = {}
    values = values if isinstance(values, dict) else {}
    values.update({"config": config.to_dict(), "command": sys.argv})
    with open(path + ".tmp", "w") as file:
        json.dump(values, file, indent=2, default=str)
    os.replace(path + ".tmp", path)
    return config.checkpoint_dir


def _restore_counters(counters: SharedCounters, saved: dict[str, torch.Tensor]) -> None:
    """Same worker count: row by row. Otherwise the totals go to worker 0 (rates and losses stay right)."""
    ints, floats, staleness = saved["ints"], saved["floats"], saved["staleness"]
    if ints.shape[0] != counters.workers:
        ints = torch.cat([ints.sum(0, keepdim=True), torch.zeros_like(ints[:1]).repeat(counters.workers - 1, 1)])
        floats = torch.cat([floats.sum(0, keepdim=True), torch.zeros_like(floats[:1]).repeat(counters.workers - 1, 1)])
        staleness = torch.cat([staleness.sum(0, keepdim=True),
                               torch.zeros_like(staleness[:1]).repeat(counters.workers - 1, 1)])
    counters.load(ints, floats, staleness)
    counters.ints[:, READY] = 0


def train(model: nn.Module, loss_fn: Callable, batches: Sequence | Iterable, config: Config,
          evaluate: Callable[[nn.Module], dict[str, float]] | None = None, *,
          agent: CommunicationAgent | None = None) -> TrainResult:
    """Train `model` with lock-free asynchronous workers (or synchronously, per `config.mode`).

    model: an nn.Module on the CPU (workers place replicas on config.devices). loss_fn(model, batch) -> scalar
    loss or (loss, n_tokens_or_examples); must be picklable (a module-level function). batches: a sequence (or
    re-iterable, read once) of CPU batches - tensors, tuples or dicts of tensors. evaluate(model) -> dict of metrics,
    run in this process on a snapshot. Raises WorkerFailed (after checkpointing) when a worker fails.
    """
    from .schedules import make_schedule
    from .shared_optim import SharedOptimizer

    if not isinstance(config, Config):
        raise TypeError(f"config must be a hogwild.Config, got {type(config).__name__}")
    if any(t.device.type != "cpu" for t in model.state_dict().values()):
        raise ValueError("model must be on the CPU: the parent keeps the shared copy; workers put replicas on "
                         "Config.devices")
    batches = as_sequence(batches)
    n_batches, workers = len(batches), config.workers
    if config.data_assignment == "partition" and n_batches < workers:
        raise ValueError(f"Config.data_assignment='partition' needs at least one batch per worker: "
                         f"{n_batches} batches for {workers} workers")
    run_dir = _prepare_run_dir(config)
    last_path = os.path.join(run_dir, "last.pt") if run_dir else None
    resume_state = load_checkpoint(last_path, model) if config.resume and os.path.exists(last_path) else None

    for param in model.parameters():
        param.grad = None  # a .grad would otherwise be moved to shared memory and summed into by every worker
    params = list(model.parameters())
    if config.check_shm:
        check_shared_memory(_model_nbytes(model) + SharedOptimizer.state_nbytes(params, config.optimizer,
                                                                            **config.optimizer_args))
    model.share_memory()
    optimizer = SharedOptimizer(params, config.optimizer, config.lr, **config.optimizer_args)
    schedule = make_schedule(config.lr_schedule, config.lr, decay_per_epoch=config.decay_per_epoch,
                             warmup_steps=config.warmup_steps, workers=workers, min_lr=config.min_lr)
    counters = SharedCounters(workers)
    control = torch.zeros(2, dtype=torch.int64).share_memory_()
    start_seq, partition_start = 0, [(0, 0)] * workers
    torch.manual_seed(config.seed)
    if resume_state is not None:
        restore_model(model, resume_state)
        optimizer.load_state_dict(resume_state["optimizer"])
        _restore_counters(counters, resume_state["counters"])
        restore_rng_states(resume_state["rng"])
        position = resume_state["data_position"]
        if position["n_batches"] != n_batches:
            raise ValueError(f"cannot resume {last_path}: it was trained on {position['n_batches']} batches, "
                             f"now there are {n_batches}")
        if config.data_assignment == "partition":
            if len(position.get("workers", [])) != workers:
                raise ValueError(f"cannot resume {last_path} in partition mode with {workers} workers: it was "
                                 f"written with {len(position.get('workers', []))} shards")
            partition_start = [tuple(p) for p in position["workers"]]
        start_seq = position["seq"]

    scratch = tempfile.mkdtemp(prefix="hogwild-")
    metrics = None
    try:
        store = BatchStore(batches, scratch)
        ctx = mp.get_context("spawn")
        errors = ctx.Queue()
        feed = None
        if config.data_assignment == "queue" and config.mode != "sync":
            feed = BatchFeed(ctx, n_batches, workers, config.epochs, config.seed, config.shuffle,
                             config.queue_depth, start_seq)
        specs = [WorkerSpec(
            worker=w, device=device, model=model, loss_fn=loss_fn, optimizer=optimizer, schedule=schedule,
            store=store, counters=counters, control=control, tickets=feed.queue if feed else None, errors=errors,
            parent_pid=os.getpid(), workers=workers, seed=config.seed, shuffle=config.shuffle, epochs=config.epochs,
            max_steps=config.max_steps, time_limit=config.time_limit, clip_norm=config.clip_norm,
            skip_nonfinite=config.skip_nonfinite, max_nonfinite_in_a_row=config.max_nonfinite_in_a_row,
            threads=config.threads_per_worker, partition_start=partition_start[w] if partition_start else (0, 0),
            start_seq=start_seq) for w, device in enumerate(config.devices)]
        if config.mode == "sync":
            from .sync import sync_main
            init = f"file://{os.path.join(scratch, 'rendezvous')}"
            processes = [ctx.Process(target=sync_main, args=(spec, init), name=f"hogwild-sync-{spec.worker}")
                         for spec in specs]
        else:
            processes = [ctx.Process(target=worker_main, args=(spec,), name=f"hogwild-worker-{spec.worker}")
                         for spec in specs]
        supervisor = Supervisor(processes, errors, config.devices)
        initial = counters.snapshot()
        total = _total_updates(config, n_batches)
        metrics = MetricsLog(run_dir, workers, total, config.progress, config.tensorboard, initial)
        stop = _StopRequest(control)
        state = SharedTrainingState(model, optimizer, counters, control, config, stop.request)

        def write_checkpoint(path: str, model_state: dict[str, torch.Tensor] | None = None, **extra: Any) -> None:
            snapshot = counters.snapshot()
            position = {"n_batches": n_batches, "seq": resume_seq(snapshot["ints"], start_seq),
                        "workers": partition_positions(snapshot["ints"])}
            if config.data_assignment == "partition":
                position["seq"] = 0
            if evaluator is not None and "evaluator" not in extra:
                extra["evaluator"] = evaluator.state_dict()
            save_checkpoint(path, build_checkpoint(model_state or model.state_dict(), optimizer.state_dict(),
                                                   snapshot, position, config.to_dict(), **extra))

        def save_best(model_state: dict[str, torch.Tensor], best: dict[str, float], updates: int) -> None:
            if run_dir:
                write_checkpoint(os.path.join(run_dir, "best.pt"), model_state, metrics=best, best_step=updates,
                                 evaluator=None)

        evaluator = None
        failure, records = None, []
        with graceful_signals(lambda name: stop.request(f"signal {name}")):
            if agent is not None:
                agent.start(state)
            _start_workers(supervisor)
            # After spawning: an eval_device='cuda' snapshot must not initialise CUDA before the workers exist.
            evaluator = Evaluator(model, evaluate, config, save_best) if evaluate is not None else None
            if evaluator is not None and resume_state is not None and resume_state.get("evaluator"):
                evaluator.load_state_dict(resume_state["evaluator"])
            if feed is not None:
                feed.start(lambda: bool(control[0]))
            started, deadline = time.time(), None
            try:
                failure = _wait_until_ready(supervisor, counters, stop, agent, state)
                if failure is None and stop.reason is None:
                    started = time.time()  # the clock starts when every worker is ready to train
                    deadline = started + config.time_limit if config.time_limit else None
                    control[START] = int(started * 1000)
                    failure, records = _parent_loop(config, supervisor, counters, metrics, evaluator, stop, agent,
                                                    state, store, write_checkpoint, deadline, last_path)
            finally:
                supervisor.stop(control, config.join_timeout)
                if feed is not None:
                    feed.close()
                if agent is not None:
                    state.failure = failure
                    agent.stop(state)
        wall = time.time() - started
        snapshot = counters.snapshot()
        records.append(metrics.record(snapshot))
        updates = int(snapshot["ints"][:, UPDATES].sum())
        reason = "failure" if failure else stop.reason or _natural_reason(config, updates, deadline)
        metrics.event("stop", reason=reason, updates=updates, failure=failure)
        final_metrics = None
        if evaluator is not None and not failure:
            final_metrics = evaluator(updates, final=True)  # before last.pt, which keeps the evaluator's best
            metrics.evaluation(updates, final_metrics, final=True)
        if last_path:
            write_checkpoint(last_path)
        if failure:
            worker = supervisor.failed_worker
            raise WorkerFailed(f"training stopped: {failure}" + (f"\ncheckpoint written to {last_path}"
                                                                  if last_path else ""), worker, last_path)
        staleness_mean, histogram = staleness_summary(snapshot["ints"], snapshot["staleness"])
        best_path = os.path.join(run_dir, "best.pt") if run_dir else None
        return TrainResult(
            final_metrics=final_metrics, best_metrics=evaluator.best_metrics if evaluator else None,
            best_step=evaluator.best_step if evaluator else None,
            history=evaluator.history if evaluator else [], updates=updates, wall_seconds=wall,
            worker_updates=[int(x) for x in snapshot["ints"][:, UPDATES]],
            examples=int(snapshot["ints"][:, EXAMPLES].sum()), final_loss=metrics.last_loss,
            staleness_mean=staleness_mean, staleness_histogram=histogram,
            skipped_updates=int(snapshot["ints"][:, SKIPPED].sum()), stop_reason=reason, run_dir=run_dir,
            phase_ms=phase_milliseconds(snapshot["ints"], snapshot["floats"]),
            checkpoint=last_path, best_checkpoint=best_path if best_path and os.path.exists(best_path) else None,
            records=records)
    finally:
        if metrics is not None:
            metrics.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _start_workers(supervisor: Supervisor) -> None:
    try:
        supervisor.start()
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        if "pickle" not in str(error).lower():
            raise
        raise TypeError(f"cannot send the model, loss_fn or batches to the spawned workers: {error}. Define loss_fn "
                        f"(and custom batch classes) at module level, not as lambdas or nested functions") from error


class _StopRequest:
    """The first reason to stop wins; setting control[0] tells every worker to finish its step and exit."""

    def __init__(self, control: torch.Tensor):
        self.control, self.reason = control, None

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.control[0] = 1


def _total_updates(config: Config, n_batches: int) -> int | None:
    per_epoch = -(-n_batches // config.workers) if config.mode == "sync" else n_batches
    totals = [t for t in (config.max_steps, config.epochs and config.epochs * per_epoch) if t]
    return min(totals) if totals else None


def _natural_reason(config: Config, updates: int, deadline: float | None) -> str:
    if config.max_steps is not None and updates >= config.max_steps:
        return "max_steps"
    if deadline is not None and time.time() >= deadline:
        return "time_limit"
    return "epochs"


def _wait_until_ready(supervisor: Supervisor, counters: SharedCounters, stop: _StopRequest,
                      agent: CommunicationAgent | None, state: SharedTrainingState) -> str | None:
    """Wait until every worker has started and mapped the batches (spawning takes seconds), so that no worker
    races ahead of the others and wall time and time limits count training only."""
    deadline = time.monotonic() + _START_TIMEOUT
    while stop.reason is None and not np.all(counters.ints[:, READY].numpy() == 1):
        failure = supervisor.wait(0.02) or (agent.failure() if agent is not None else None)
        if failure is not None:
            return failure
        if supervisor.all_exited():
            return "every worker exited before training started"
        if time.monotonic() > deadline:
            late = [w for w in range(counters.workers) if counters.ints[w, READY] != 1]
            return f"worker(s) {late} did not become ready within {_START_TIMEOUT:.0f} s of spawning"
    return None


def _parent_loop(config: Config, supervisor: Supervisor, counters: SharedCounters, metrics: MetricsLog,
                 evaluator: Evaluator | None, stop: _StopRequest, agent: CommunicationAgent | None,
                 state: SharedTrainingState, store: BatchStore, write_checkpoint: Callable, deadline: float | None,
                 last_path: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    """Only the parent decides when to log, evaluate, checkpoint and stop. Returns (failure or None, records)."""
    start = counters.global_updates()
    next_log, next_eval, next_checkpoint = start + config.log_every, None, None
    if config.eval_every:
        next_eval = start + config.eval_every
    if config.checkpoint_every:
        next_checkpoint = start + config.checkpoint_every
    next_eval_time = time.time() + config.eval_every_seconds if config.eval_every_seconds else None
    store_removed, records = False, []
    while True:
        failure = supervisor.wait(_TICK)
        if failure is None and agent is not None:
            agent.poll(state)
            failure = agent.failure()
        if failure is not None:
            return failure, records
        if supervisor.all_exited() or stop.reason is not None:
            return None, records
        snapshot = counters.snapshot()
        updates = metrics.progress(snapshot)
        if not store_removed and np.all(snapshot["ints"][:, READY] == 1):
            store.remove()  # every worker has it mapped: nothing to leak on disk if we are killed later
            store_removed = True
        if updates >= next_log:
            records.append(metrics.record(snapshot))
            next_log = updates + config.log_every
        if deadline is not None and time.time() >= deadline:
            stop.request("time_limit")
        now = time.time()
        if evaluator is not None and ((next_eval is not None and updates >= next_eval)
                                      or (next_eval_time is not None and now >= next_eval_time)):
            metrics.evaluation(updates, evaluator(updates))
            next_eval = updates + config.eval_every if config.eval_every else None
            next_eval_time = time.time() + config.eval_every_seconds if config.eval_every_seconds else None
            if evaluator.should_stop:
                stop.request("early_stopping")
        if last_path and next_checkpoint is not None and updates >= next_checkpoint:
            write_checkpoint(last_path)
            metrics.event("checkpoint", path=last_path, updates=updates)
            next_checkpoint = updates + config.checkpoint_every
