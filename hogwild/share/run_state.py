"""The shared run state, and the only code that reads or writes it: lock-free progress counters in shared memory,
one row per worker, written only by that worker, and the run's stop and start flags (RunControl).

The global update count is the sum of the per-worker counts, so no two processes ever write the same
slot and no lock is needed. The parent (and a communication agent) only read (its readers, a CounterSnapshot).

The one exception is StepBudget, the shared count of claimed update slots that makes max_steps exact in partition
mode: workers claim slots under a lock (in queue mode the feed deals exactly max_steps batches instead, feed.py, and
a worker killed while holding a lock blocks nobody). The parent writes a worker's row only between two processes
of that worker (`restarting`).

Serves step 2 of `hogwild.train` (share): created there, written by the workers (step 3), read by the parent
(steps 4 and 5).

Usage: `counters = SharedCounters(workers=2); view = counters.worker_view(0); counters.snapshot().updates()`;
`control = RunControl(); control.request_stop("time_limit")`; in a worker `if control.stopping: ...`
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

STALENESS_BINS = 65  # bins 0..63 count exactly; the last bin counts staleness >= 64

# Columns of SharedCounters.ints.
UPDATES = 0  # shared updates this worker applied
SKIPPED = 1  # updates skipped because the gradient was not finite
EXAMPLES = 2  # examples (or tokens, when loss_fn returns a count) trained on
STALENESS_SUM = 3  # sum of the staleness of every applied update
TAKEN = 4  # batches (tickets) this worker took from the feed
IN_PROGRESS = 5  # first sequence number this worker holds untrained (being trained or received), -1 if none
LAST_SEQ = 6  # the highest sequence number this worker received, -1 before the first
EPOCH = 7  # partition mode: the worker's current epoch
POSITION = 8  # partition mode: batches of its shard finished in that epoch
READY = 9  # 1 once the worker has mapped the batches and is about to train
_INT_COLUMNS = 10
# Columns of SharedCounters.floats.
LOSS_SUM = 0
LOSS_COUNT = 1
LAST_LR = 2
PHASES = ("pull", "compute", "push", "update")  # seconds of every applied update, summed, in columns 3..6
PHASE_COLUMNS = slice(3, 7)
# Columns of SharedCounters.graph_steps: diagnostics of graphed workers (Config.graphs), not checkpointed.
GRAPHS = 0  # CUDA graphs the worker captured at start-up (on the CPU: signatures with static inputs)
EAGER_STEPS = 1  # steps whose batch shape had no graph, run eagerly
CAPTURE_MS = 2  # milliseconds the worker took to prepare its graphed step (probe, warm-ups, captures)
PREPARING_SINCE = 3  # time.time() in ms when the worker began preparing its step (0: not yet); start-up's second part
_GRAPH_COLUMNS = 4


class SharedCounters:
    """ints (W, 10) int64, floats (W, 7) float64, staleness histogram (W, STALENESS_BINS) int64, graph_steps (W, 4)
    int64 - all shared; graph_steps is this run's alone (a checkpoint keeps the others)."""

    def __init__(self, workers: int):
        self.workers = workers
        self.ints = torch.zeros(workers, _INT_COLUMNS, dtype=torch.int64)  # (W, 10)
        self.ints[:, IN_PROGRESS] = -1
        self.ints[:, LAST_SEQ] = -1
        self.floats = torch.zeros(workers, 7, dtype=torch.float64)  # (W, 7)
        self.staleness = torch.zeros(workers, STALENESS_BINS, dtype=torch.int64)  # (W, BINS)
        self.graph_steps = torch.zeros(workers, _GRAPH_COLUMNS, dtype=torch.int64)  # (W, 4)
        for tensor in (self.ints, self.floats, self.staleness, self.graph_steps):
            tensor.share_memory_()

    def global_updates(self) -> int:
        return int(self.ints[:, UPDATES].sum())

    def worker_view(self, worker: int) -> "WorkerView":
        return WorkerView(self, worker)

    def snapshot(self) -> "CounterSnapshot":
        """A private copy of every counter (for the parent's metrics, progress watch and checkpoints)."""
        return CounterSnapshot(self.ints.numpy().copy(), self.floats.numpy().copy(), self.staleness.numpy().copy(),
                               self.graph_steps.numpy().copy())

    def ready_count(self) -> int:
        return int(self.ints[:, READY].sum())

    def all_ready(self) -> bool:
        return bool(np.all(self.ints[:, READY].numpy() == 1))

    def not_ready(self) -> list[int]:
        return [w for w in range(self.workers) if self.ints[w, READY] != 1]

    def preparing(self, now: float) -> dict[int, float]:
        """Worker -> seconds since it began preparing its step (capturing graphs, compiling), of the workers that have
        mapped the batches but are not ready yet; now: time.time()."""
        since = self.graph_steps[:, PREPARING_SINCE].numpy()
        return {w: now - since[w] / 1000 for w in self.not_ready() if since[w] > 0}

    def ready(self, worker: int) -> bool:
        return bool(self.ints[worker, READY] == 1)

    def restarting(self, worker: int) -> None:
        """The parent's one write into a worker's row, made while no process owns it (the old one is dead, its
        replacement not yet started): the row is not ready again until the replacement has mapped the batches."""
        self.ints[worker, READY] = 0
        self.graph_steps[worker, PREPARING_SINCE] = 0

    def tickets_done(self) -> np.ndarray:
        """Per worker, the batches whose step has ended: applied plus skipped updates. (W,) int64. Each counts with
        one store (UPDATES or SKIPPED += 1), so a worker killed at any point has counted a batch or not, and counts
        them in the order it received them: the feed (feed.py) hands the ones it had not counted to another."""
        return self.ints[:, UPDATES].numpy() + self.ints[:, SKIPPED].numpy()

    def skipped_total(self) -> int:
        return int(self.ints[:, SKIPPED].sum())

    def load(self, ints: torch.Tensor, floats: torch.Tensor, staleness: torch.Tensor) -> None:
        """Restore counters from a checkpoint (same number of workers) before the workers start."""
        self.ints.copy_(ints)
        self.floats.copy_(floats)
        self.staleness.copy_(staleness)
        # Ticket bookkeeping restarts: the checkpoint's data position says where the feed resumes.
        self.ints[:, IN_PROGRESS] = -1
        self.ints[:, LAST_SEQ] = -1
        self.ints[:, TAKEN] = 0
        self.ints[:, READY] = 0  # every worker of this run reports again


@dataclass(frozen=True)
class CounterSnapshot:
    """A private copy of every counter, read by name: `worker=None` is the total, `since` an earlier snapshot."""

    ints: np.ndarray  # (W, 10)
    floats: np.ndarray  # (W, 7)
    staleness: np.ndarray  # (W, STALENESS_BINS)
    graph_steps: np.ndarray | None = None  # (W, 4): not in a checkpoint

    def arrays(self) -> dict[str, np.ndarray]:
        """The checkpoint's form, {"ints", "floats", "staleness"}, which `SharedCounters.load` takes back."""
        return {"ints": self.ints, "floats": self.floats, "staleness": self.staleness}

    def _int(self, column: int, worker: int | None) -> int:
        return int(self.ints[:, column].sum() if worker is None else self.ints[worker, column])

    def updates(self, worker: int | None = None) -> int:
        return self._int(UPDATES, worker)

    def worker_updates(self) -> list[int]:
        return [int(x) for x in self.ints[:, UPDATES]]

    def examples(self, worker: int | None = None) -> int:
        return self._int(EXAMPLES, worker)

    def skipped(self, worker: int | None = None) -> int:
        return self._int(SKIPPED, worker)

    def mean_loss(self, since: CounterSnapshot | None = None, worker: int | None = None) -> float | None:
        """Mean training loss over the losses recorded since `since` (None when there are none)."""
        floats = self.floats if worker is None else self.floats[worker]
        loss, count = floats[..., LOSS_SUM].sum(), floats[..., LOSS_COUNT].sum()
        if since is not None:
            before = since.floats if worker is None else since.floats[worker]
            loss, count = loss - before[..., LOSS_SUM].sum(), count - before[..., LOSS_COUNT].sum()
        return float(loss / count) if count > 0 else None

    def graphs(self, worker: int | None = None) -> int:
        """CUDA graphs the workers captured (Config.graphs), all workers together or one worker's."""
        if self.graph_steps is None:
            return 0
        return int(self.graph_steps[:, GRAPHS].sum() if worker is None else self.graph_steps[worker, GRAPHS])

    def capture_seconds(self, worker: int) -> float:
        """Seconds a graphed worker took at start-up to prepare its step (probe, warm-ups, captures)."""
        return 0.0 if self.graph_steps is None else float(self.graph_steps[worker, CAPTURE_MS]) / 1000

    def eager_steps(self, worker: int | None = None) -> int:
        """Steps of graphed workers that ran eagerly: their batch shape had no graph."""
        if self.graph_steps is None:
            return 0
        return int(self.graph_steps[:, EAGER_STEPS].sum() if worker is None else self.graph_steps[worker, EAGER_STEPS])

    def last_lr(self) -> float:
        return float(self.floats[:, LAST_LR].max())

    def staleness_summary(self) -> tuple[float, list[int]]:
        """(mean staleness over all applied updates, histogram summed over workers)."""
        updates = self.updates()
        mean = float(self.ints[:, STALENESS_SUM].sum()) / updates if updates else 0.0
        return mean, [int(x) for x in self.staleness.sum(axis=0)]

    def phase_milliseconds(self, since: CounterSnapshot | None = None) -> dict[str, float]:
        """Mean milliseconds per applied update in each phase (pull, compute, push, update), over all workers."""
        seconds, updates = self.floats[:, PHASE_COLUMNS].sum(axis=0), float(self.updates())
        if since is not None:
            seconds = seconds - since.floats[:, PHASE_COLUMNS].sum(axis=0)
            updates -= float(since.updates())
        return {name: (1000 * float(s) / updates if updates else 0.0) for name, s in zip(PHASES, seconds)}

    def steps(self, worker: int) -> float:
        """A worker's steps so far, counted the same in every mode: tickets taken, or losses recorded plus skipped
        updates (queue mode takes a ticket per step; partition and sync modes record a loss or a skip per step)."""
        return max(float(self.ints[worker, TAKEN]), float(self.floats[worker, LOSS_COUNT] + self.ints[worker, SKIPPED]))

    def worker_state(self, worker: int) -> np.ndarray:
        """Everything a worker's progress moves (its int counters and loss count): unchanged while it makes none."""
        return np.concatenate([self.ints[worker], self.floats[worker, LOSS_COUNT:LOSS_COUNT + 1]])

    def resume_seq(self, start_seq: int) -> int:
        """Queue mode: the first ticket not known to be trained. Tickets being trained, or received and not yet
        started, count as not trained (so with several workers a checkpoint may repeat batches other workers
        finished after the earliest held ticket: at most one queue item, up to 32 tickets, per worker; with one
        worker it is exact)."""
        ints = self.ints
        busy = ints[:, IN_PROGRESS][ints[:, IN_PROGRESS] >= 0]
        if len(busy):
            return int(busy.min())
        if ints[:, TAKEN].sum() == 0:
            return start_seq
        return int(ints[:, LAST_SEQ].max()) + 1

    def partition_positions(self) -> list[tuple[int, int]]:
        """Partition mode: every worker's (epoch, finished position) for the checkpoint."""
        return [(int(row[EPOCH]), int(row[POSITION])) for row in self.ints]


class WorkerView:
    """A worker's own row through numpy views: a counter bump costs ~100 ns, no tensor dispatch."""

    def __init__(self, counters: SharedCounters, worker: int):
        self._all_ints = counters.ints.numpy()  # (W, 10) view of shared memory
        self._ints = self._all_ints[worker]  # (10,)
        self._floats = counters.floats.numpy()[worker]  # (7,)
        self._hist = counters.staleness.numpy()[worker]  # (BINS,)
        self._graph_steps = counters.graph_steps.numpy()[worker]  # (4,)

    def global_updates(self) -> int:
        return int(self._all_ints[:, UPDATES].sum())

    def received(self, first_seq: int, last_seq: int) -> None:
        """Queue mode: a chunk of consecutive tickets first_seq..last_seq arrived."""
        self._ints[IN_PROGRESS] = first_seq
        self._ints[LAST_SEQ] = last_seq

    def take(self, seq: int) -> None:
        self._ints[LAST_SEQ] = max(self._ints[LAST_SEQ], seq)
        self._ints[IN_PROGRESS] = seq
        self._ints[TAKEN] += 1

    def applied(self, staleness: int, examples: int, loss: float, lr: float,
                phases: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)) -> None:
        self._floats[PHASE_COLUMNS] += phases
        self._ints[STALENESS_SUM] += staleness
        self._hist[min(staleness, STALENESS_BINS - 1)] += 1
        self._ints[EXAMPLES] += examples
        self._floats[LOSS_SUM] += loss
        self._floats[LOSS_COUNT] += 1
        self._floats[LAST_LR] = lr
        self._ints[UPDATES] += 1  # last: the update is "landed" once everything about it is recorded

    def contributed(self, examples: int, loss: float) -> None:
        """sync mode, ranks > 0: trained a batch whose gradient rank 0 applies."""
        self._ints[EXAMPLES] += examples
        self._floats[LOSS_SUM] += loss
        self._floats[LOSS_COUNT] += 1

    def skipped(self) -> None:
        self._ints[SKIPPED] += 1

    def ready(self) -> None:
        self._ints[READY] = 1

    def preparing(self) -> None:
        """The batches are mapped: the worker prepares its step (start-up's second part, bounded on its own)."""
        self._graph_steps[PREPARING_SINCE] = int(time.time() * 1000)

    def graphs_captured(self, count: int, seconds: float) -> None:
        """A graphed worker's step is prepared: `count` graphs (0 after a fallback) in `seconds`."""
        self._graph_steps[GRAPHS] = count
        self._graph_steps[CAPTURE_MS] = round(seconds * 1000)

    def eager_step(self) -> None:
        """A graphed worker's step without a graph for its batch's shape."""
        self._graph_steps[EAGER_STEPS] += 1

    def finished(self, epoch: int | None = None, position: int | None = None, pending: int = -1) -> None:
        """The batch is trained. pending: the next ticket this worker holds but has not started (-1: none)."""
        if epoch is not None:
            self._ints[EPOCH] = epoch
            self._ints[POSITION] = position
        self._ints[IN_PROGRESS] = pending


class StepBudget:
    """max_steps made exact in partition mode: a worker claims an update slot before it trains a batch, atomically under
    one lock (7.6 us per claim, measured uncontended on the busy 2-core machine, next to milliseconds per update),
    and gives it back when the update is not applied (non-finite gradient, no batch left). Reading the global count
    and comparing would let every worker pass the check at max_steps - 1, ending up to workers - 1 updates over.

    Usage: `budget = StepBudget(ctx, max_steps, already_done)`; in a worker `if not budget.claim(): stop`
    """

    def __init__(self, ctx, max_steps: int, done: int = 0):
        self.max_steps = max_steps
        self._claimed = ctx.Value("q", done)  # slots taken: applied updates plus those being computed

    def claim(self) -> bool:
        with self._claimed.get_lock():
            if self._claimed.value >= self.max_steps:
                return False
            self._claimed.value += 1
            return True

    def release(self) -> None:
        with self._claimed.get_lock():
            self._claimed.value -= 1


class PhaseClock:
    """Times the phases of one update: time.perf_counter on the CPU; CUDA events on a GPU, where the work is
    asynchronous and only events recorded in the streams tell when it ran (a host clock would time the launches).

    Usage: `clock.mark()` at each phase boundary (on a GPU, optionally on a stream), then, once the device has
    finished the marked work, `clock.seconds()` -> the durations between consecutive marks."""

    def __init__(self, device: torch.device, marks: int = 4):
        self.cuda = device.type == "cuda"
        self.count = 0
        if self.cuda:
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(marks)]  # reused every update
        else:
            self.times = [0.0] * marks

    def mark(self, stream=None) -> None:
        if self.cuda:
            self.events[self.count].record(stream)
        else:
            self.times[self.count] = time.perf_counter()
        self.count += 1

    def seconds(self) -> list[float]:
        """Durations between consecutive marks since the last call (on a GPU: waits for the last mark)."""
        count, self.count = self.count, 0
        if self.cuda:
            for event in self.events[:count]:
                event.synchronize()
            return [self.events[i].elapsed_time(self.events[i + 1]) / 1000 for i in range(count - 1)]
        return [self.times[i + 1] - self.times[i] for i in range(count - 1)]


# The columns of RunControl's flags.
_STOP = 0  # != 0: finish the current step and exit
_START = 1  # 0 until every worker is ready, then the parent's start time in milliseconds


class RunControl:
    """A (2,) int64 tensor in shared memory, [stop flag, start time in ms], behind named methods. Picklable:
    spawned workers get the shared tensor's handle (the stop reason stays in the parent)."""

    def __init__(self) -> None:
        self._set_flags(torch.zeros(2, dtype=torch.int64).share_memory_())
        self.stop_reason: str | None = None  # the first reason given to request_stop (parent side)

    def _set_flags(self, flags: torch.Tensor) -> None:
        self._flags = flags
        self._view = flags.numpy()  # a numpy view of the shared storage: reads cost ~100 ns, not a torch indexing

    def __getstate__(self) -> dict[str, Any]:
        return {"flags": self._flags}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._set_flags(state["flags"])
        self.stop_reason = None

    def request_stop(self, reason: str | None = None) -> None:
        """Tell every worker to finish its step and exit; the first reason given is kept (`stop_reason`)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._view[_STOP] = 1

    @property
    def stopping(self) -> bool:
        """A stop has been requested (by the parent, a signal, an agent or the supervisor)."""
        return bool(self._view[_STOP])

    def mark_started(self, when: float) -> None:
        """Every worker is ready: training starts at `when` (time.time()), which workers read for their deadline."""
        self._view[_START] = int(when * 1000)

    @property
    def started(self) -> bool:
        return bool(self._view[_START])

    def wait_for_start(self, stopped: Callable[[], bool], time_limit: float | None) -> float | None:
        """Block until the parent says go (every worker is ready); returns the deadline (time.time()) or None."""
        flags = self._view
        while not flags[_START] and not stopped():
            time.sleep(0.002)
        return flags[_START] / 1000 + time_limit if time_limit else None
