"""The parent's side of a run: start the workers, wait until they are ready, then the loop that alone decides when to
log, evaluate, checkpoint and stop, while watching for failures (evaluations run on a thread beside it).

Serves step 4 of `hogwild.train` (supervise); `total_updates` and `natural_reason` also serve steps 3 and 5.

Usage (engine.py): `loop = ParentLoop(shared, supervisor, metrics, attached_agent)`;
`failure = loop.wait_until_ready()`; `failure, records = loop.run(periodic, deadline)`.
"""
from __future__ import annotations

import pickle
import time
from typing import Any, Callable

from ..config import Config
from ..process_signals import parent_signals_blocked
from ..share.shared_run import SharedRun
from .agent import AttachedAgent
from .evaluation import PeriodicEvaluation
from .metrics import MetricsLog
from .progress_watch import ProgressWatch
from .supervisor import Supervisor

TICK = 0.1  # seconds between the parent's checks
START_TIMEOUT = 600.0  # seconds for spawned workers to import torch, unpickle the model and map the batches
STARTUP_GRACE = 30.0  # with a time limit, spawning may take that limit plus this before the run is stopped (2
# workers took 12 s to start on a 2-core machine busy with other test runs; 100 workers on 2 cores take minutes)
PREPARE_TIMEOUT = 600.0  # seconds a worker may take, once it has mapped the batches, to prepare its step (capture its
# CUDA graphs: ~30-50 NMT shapes at ~0.5 s each, an estimate, several workers of a GPU at once; compile): its own bound
STARTUP_QUIET = 2.0  # a start-up shorter than this prints nothing; a longer one prints progress every:
STARTUP_EVERY = 5.0


def start_workers(supervisor: Supervisor) -> None:
    """Spawn the workers; a model, loss_fn or batch that cannot be pickled gets an error saying what to change.

    SIGINT (and SIGTERM, SIGHUP) is blocked while spawning: the workers inherit the blocked mask, so a Ctrl-C (sent
    by the terminal to the whole process group) during their seconds of start-up does not kill them mid-import with
    a traceback each; the parent receives it once unblocked, and stops the run."""
    try:
        with parent_signals_blocked():
            supervisor.start()
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        if "pickle" not in str(error).lower():
            raise
        raise TypeError(f"cannot send the model, loss_fn or batches to the spawned workers: {error}. Define loss_fn "
                        f"(and custom batch classes) at module level, not as lambdas or nested functions") from error


def total_updates(config: Config, n_batches: int) -> int | None:
    """The number of updates the run will make if nothing stops it early (None: no bound but time)."""
    per_epoch = -(-n_batches // config.workers) if config.mode == "sync" else n_batches
    totals = [t for t in (config.max_steps, config.epochs and config.epochs * per_epoch) if t]
    return min(totals) if totals else None


def natural_reason(config: Config, updates: int, deadline: float | None) -> str:
    """Why a run whose workers all finished on their own stopped."""
    if config.max_steps is not None and updates >= config.max_steps:
        return "max_steps"
    if deadline is not None and time.time() >= deadline:
        return "time_limit"
    return "epochs"


class ParentLoop:
    """Only the parent decides when to log, evaluate, checkpoint and stop (workers only report counters)."""

    def __init__(self, shared: SharedRun, supervisor: Supervisor, metrics: MetricsLog,
                 agent: AttachedAgent | None = None, waiting: Callable[[], list[bool]] | None = None) -> None:
        """waiting(): per worker, whether it waits on the feed for a ticket (BatchFeed.waiting): not watched."""
        self.config, self.counters, self.control = shared.config, shared.counters, shared.control
        self.waiting = waiting
        self.checkpoints = shared.checkpoints
        self.supervisor, self.metrics, self.agent = supervisor, metrics, agent
        self.watch = ProgressWatch(self.counters.workers, self.config.hang_timeout)
        supervisor.describe_late = self._describe_late
        self._starting: dict[int, float] = {}  # replacement worker -> time.monotonic() of its start

    def _describe_late(self, worker: int, waited: float) -> str | None:
        """A worker that ignored the stop request was hung (progress_watch), unless it is a replacement still
        starting (it has made no step of its own: the watch's record is its predecessor's)."""
        return self.watch.describe_late(worker, waited) if self.counters.ready(worker) else None

    def _replaced(self, failure: str) -> bool:
        """While Config.max_restarts allows, replace the worker that failed (died, raised or hung: killed) with a
        fresh process on its device, its unfinished batches dealt again (feed/tickets.py); the restart is a metrics
        record. False when the run must stop instead (no restart left, an agent's failure, a stop requested)."""
        supervisor, worker = self.supervisor, self.supervisor.failed_worker
        if worker < 0 or supervisor.restarts >= self.config.max_restarts or self.control.stopping:
            return False
        supervisor.replace(worker)
        self._starting[worker] = time.monotonic()
        self.metrics.event("restart", worker=worker, reason=failure, restarts=supervisor.restarts,
                           updates=self.counters.global_updates())
        self.metrics.note(f"restarting worker {worker} ({supervisor.restarts} of --max-restarts "
                          f"{self.config.max_restarts}): {failure.splitlines()[0]}")
        return True

    def _late_replacement(self) -> list[tuple[int, str]]:
        """A replacement that has not become ready within START_TIMEOUT of its start (others are still training)."""
        now = time.monotonic()
        for worker, began in list(self._starting.items()):
            if self.counters.ready(worker):
                del self._starting[worker]
            elif now - began > START_TIMEOUT:
                return [(worker, f"(a replacement) did not become ready within {START_TIMEOUT:.0f} s of its start")]
        return []

    def _final(self, failure: str | None) -> str | None:
        """The run's failure, saying how many restarts were used when there were any."""
        restarts = self.supervisor.restarts
        if failure is None or not self.config.max_restarts:
            return failure
        return f"{failure}\n(after {restarts} restart(s); Config.max_restarts / --max-restarts is " \
               f"{self.config.max_restarts})"

    def _failure(self) -> str | None:
        failure = self.supervisor.wait(TICK)
        if failure is None and self.agent is not None:
            self.agent.poll()
            failure = self.agent.failure()
        return failure

    def wait_until_ready(self) -> str | None:
        """Wait until every worker is ready to train (spawned, the batches mapped, its step prepared), so that no worker
        races ahead of the others and wall time and time limits count training only: the training clock, and with it
        config.time_limit, starts when the last worker is ready. Returns a failure or None.

        Start-up has two bounds of its own. Spawning (import torch, unpickle the model, map the batches) is bounded by
        config.time_limit + STARTUP_GRACE (a failure naming the workers still starting: the run made no update) or else
        START_TIMEOUT; preparing a worker's step (a graphed worker captures its CUDA graphs, a compiled one compiles)
        by PREPARE_TIMEOUT from when that worker began it, whatever the time limit. A signal (the stop request) ends
        either. A slow start shows its progress, then each graphed worker's graphs and the seconds they took."""
        counters, supervisor, workers = self.counters, self.supervisor, self.counters.workers
        began = time.monotonic()
        limit = START_TIMEOUT
        if self.config.time_limit:  # the training clock starts once all are ready; spawning gets limit + grace
            limit = min(START_TIMEOUT, self.config.time_limit + STARTUP_GRACE)
        next_note, noted = began + STARTUP_QUIET, False
        while self.control.stop_reason is None and not counters.all_ready():
            failure = supervisor.wait(0.02) or (self.agent.failure() if self.agent is not None else None)
            if failure is not None:
                return failure
            if supervisor.all_exited():  # the last one may have exited since wait() looked: name its failure
                failure = supervisor.failure()
                if failure is None and (self.control.stop_reason is not None or counters.all_ready()):
                    break  # ready, then done or stopped (a failed stream) between two looks: not a start-up failure
                return failure or "every worker exited before training started"
            now = time.monotonic()
            ready, preparing = counters.ready_count(), counters.preparing(time.time())
            if now >= next_note:
                steps = f", {len(preparing)} preparing their step (CUDA graphs)" if preparing else ""
                self.metrics.note(f"starting workers: {ready}/{workers} ready after {now - began:.0f} s{steps}")
                next_note, noted = now + STARTUP_EVERY, True
            late = self._late_start(now - began, limit, ready, preparing)
            if late is not None:
                return late
        if self.control.stop_reason is None:
            if noted:
                self.metrics.note(f"all {workers} workers ready after {time.monotonic() - began:.1f} s")
            self._graphs_captured(noted)
        return None

    def _late_start(self, elapsed: float, limit: float, ready: int, preparing: dict[int, float]) -> str | None:
        """The failure of a start-up past its bounds (wait_until_ready), or None."""
        spawning = [w for w in self.counters.not_ready() if w not in preparing]
        if spawning and elapsed > limit:
            if limit < START_TIMEOUT:  # a run of zero updates is a failure, not a run that reached its limit
                return (f"time limit: workers still starting after {elapsed:.0f} s (the limit of "
                        f"{self.config.time_limit:g} s plus {STARTUP_GRACE:g} s for start-up), {ready}/"
                        f"{self.counters.workers} ready: stopped before the first update. Use fewer workers (each "
                        f"spawned worker imports torch and maps the batches) or a longer time limit")
            return f"worker(s) {spawning} did not become ready within {START_TIMEOUT:.0f} s of spawning"
        slow = [w for w, seconds in preparing.items() if seconds > PREPARE_TIMEOUT]
        if slow:
            return (f"worker(s) {slow} still preparing their step {PREPARE_TIMEOUT:.0f} s after they began (capturing "
                    f"CUDA graphs, or compiling): stopped before the first update. --graphs off (Config.graphs='off') "
                    f"captures nothing; Config.graph_limit K captures the K most frequent batch shapes only")
        return None

    def _graphs_captured(self, show: bool) -> None:
        """Each graphed worker's graphs and the seconds it took to prepare them (before the training clock): a
        metrics record, and a line on stderr after a start-up slow enough to show its progress."""
        graphed = self.metrics.graphed
        if not graphed:
            return
        snapshot = self.counters.snapshot()
        graphs = [snapshot.graphs(w) for w in graphed]
        seconds = [round(snapshot.capture_seconds(w), 3) for w in graphed]
        self.metrics.event("graphs", workers=graphed, graphs=graphs, capture_seconds=seconds)
        if show:
            self.metrics.note("graphs captured before training (worker: graphs in seconds): " + ", ".join(
                f"{w}: {n} in {s:.1f} s" for w, n, s in zip(graphed, graphs, seconds)))

    def run(self, periodic: PeriodicEvaluation | None,
            deadline: float | None) -> tuple[str | None, list[dict[str, Any]]]:
        """Supervise training until it ends. Returns (failure or None, the 'train' metrics records written).
        Periodic evaluations run beside this loop (evaluation.py), which goes on ticking while they do; one that
        fails raises EvaluationFailed (the caller stops the workers and checkpoints)."""
        config, metrics, control = self.config, self.metrics, self.control
        start = self.counters.global_updates()
        next_log = start + config.log_every
        next_checkpoint = start + config.checkpoint_every if config.checkpoint_every else None
        period = config.checkpoint_minutes * 60 if config.checkpoint_minutes is not None else None  # None: off
        checkpoint_at = time.monotonic() + period if period else None  # by time: a hard stop loses at most that
        records = []
        while True:
            failure = self._failure()
            if failure is not None:
                if self._replaced(failure):
                    continue
                return self._final(failure), records
            if self.supervisor.all_exited() or control.stop_reason is not None:
                # a worker may have exited with an error since the check above: its exit code decides, not timing
                failure = self.supervisor.failure()
                if failure is not None and self._replaced(failure):
                    continue
                return self._final(failure), records
            snapshot = self.counters.snapshot()
            # a replacement still starting is not watched (it is bounded by START_TIMEOUT, _late_replacement)
            # nor is one without a ticket, which waits on the feed (at max_steps: for updates in flight elsewhere)
            waiting = self.waiting() if self.waiting is not None else [False] * self.counters.workers
            running = [process.exitcode is None and self.counters.ready(worker) and not waiting[worker]
                       for worker, process in enumerate(self.supervisor.processes)]
            hung = self.watch.observe(snapshot, running) or self._late_replacement()
            if hung:
                failure = self.supervisor.declare_hung(*hung[0])
                if self._replaced(failure):
                    continue
                return self._final(failure), records
            updates = metrics.progress(snapshot)
            if updates >= next_log:
                records.append(metrics.record(snapshot))
                next_log = updates + config.log_every
            if deadline is not None and time.time() >= deadline:
                control.request_stop("time_limit")
            if periodic is not None:
                done = periodic.poll()
                if done is not None:
                    metrics.evaluation(*done)
                    if periodic.evaluator.should_stop:
                        control.request_stop("target" if periodic.evaluator.reached_target else "early_stopping")
                if control.stop_reason is None:
                    periodic.maybe_start(updates)
            last = self.checkpoints.last
            by_updates = next_checkpoint is not None and updates >= next_checkpoint
            if last and (by_updates or (checkpoint_at is not None and time.monotonic() >= checkpoint_at)):
                self.checkpoints.write(last)
                metrics.event("checkpoint", path=last, updates=updates)
                if next_checkpoint is not None:
                    next_checkpoint = updates + config.checkpoint_every
                if period:
                    checkpoint_at = time.monotonic() + period
