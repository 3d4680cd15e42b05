"""A device worker's step ('cuda:N', 'cpu-replica'): a private replica, its pull prefetched beside the step (pull.py),
forward and backward, the gradient copy-out (copy_out.py). With Config.graphs the step is captured as one CUDA graph
per batch shape, replayed on static input buffers; without, the same step runs eagerly on the batch moved to the
device (`StepGraphs(..., graphs=False)`): one step object, the capture an option of it.

During start-up, before the worker reports ready (outside the training clock and the hang watch), the batches' shape
signatures (the dtype and shape of every tensor field; host-side fields such as `tokens` do not count) are counted once
(`shape_counts`): a BatchSet, or any Dataset with a `batch_shapes()` method, tells them from its sizes without building
a batch; a list is read; any other Dataset builds every batch once. The largest batch's integer elements size the sparse
tables' row buffers (`id_capacity`). The signatures the run uses often enough each get static device inputs, a warm-up
on a side stream and a capture (`graph_shapes`: every signature used at least GRAPH_MIN_USES times over the run's
epochs, or the Config.graph_limit most frequent), all graphs in one shared memory pool (they never run concurrently, and
every output leaves the pool through the outbox, so their private memory may overlap: more graphs cost start-up time and
each graph's static inputs, not another step's memory). A batch whose signature has no graph runs the same step eagerly,
counted (run_state's eager steps). On the CPU nothing is captured: `run` copies the batch into the same static inputs
and calls the same step function, so the CPU tests exercise everything but the capture.

A graphed step replays work fixed at capture, so the loss must not depend on host values of the batch: the models'
padded losses (`functools.partial(nmt_loss, padded=True)`) read nothing from the device, and their count is the
batch's host-side `tokens`. A graphed step's count is taken from the host batch (`host_count`: `batch["tokens"]`,
else the leading dimension), checked against the loss's own count at capture. Dropout masks follow the batch's seed
(seed_batch before each replay: the graph reads the generator's seed and offset when it is replayed).

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes (worker.py's loop).

Usage: `step = StepGraphs(spec.model, spec.loss_fn, device, config)`; `counts = shape_counts(batches)`;
`step.prepare(batches, counts, graph_shapes(counts, limit, epochs))` before ready (it builds one batch per graph);
per step `step.pull.prefetch(version, batch)`, `step.pull.make_current()`, `result = step.run(batch, slot, clock)`;
whoever applies the update `result.resolve()` -> (finite, loss, grads, phases).
"""
from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..config import Config
from ..share.run_state import PhaseClock
from ..shared_optim import trainable_parameters
from .capture import capture_graph
from .copy_out import GradientOutbox, SlotEvents
from .gradients import batch_examples, forward_backward
from .pull import PrefetchPull
from .replica import batch_ids, move_batch, sparse_tables

WARMUP_STEPS = 3  # eager steps on a side stream before a capture (cuDNN/cuBLAS plans, the allocator)
GRAPH_MIN_USES = WARMUP_STEPS + 1  # a graph costs its warm-up and its capture: about this many eager steps


def tensor_fields(batch: Any, path: tuple = ()) -> Iterator[tuple[tuple, Tensor]]:
    """(path, tensor) of every tensor in a batch (tensor, dict, list or tuple, nested), in a fixed order."""
    if isinstance(batch, Tensor):
        yield path, batch
    elif isinstance(batch, dict):
        for key, value in batch.items():
            yield from tensor_fields(value, path + (key,))
    elif isinstance(batch, (list, tuple)):
        for index, value in enumerate(batch):
            yield from tensor_fields(value, path + (index,))


def batch_signature(batch: Any) -> tuple:
    """What a captured graph fixes: ((path, dtype, shape), ...) of the batch's tensors."""
    return tuple((path, tensor.dtype, tuple(tensor.shape)) for path, tensor in tensor_fields(batch))


def shape_counts(batches: Any) -> list[tuple[tuple, int, int]]:
    """(signature, index of its first batch, batches of it) of every signature of `batches`, most frequent first
    (ties: the earlier first). Batches that tell their shapes - a `batch_shapes()` method giving (index of the first
    batch of a shape, batches of it, a batch of that shape, its tensors may be on the meta device): data/batch_set.py's
    BatchSet, docs/library.md's protocol - are asked, and no batch is built; a list's batches are read as they are;
    any other Dataset builds each of its batches once (seconds per million examples)."""
    tell = getattr(batches, "batch_shapes", None)
    groups = tell() if callable(tell) else ((index, 1, batch) for index, batch in enumerate(batches))
    counts: Counter = Counter()
    first: dict[tuple, int] = {}
    for index, count, batch in groups:
        signature = batch_signature(batch)
        counts[signature] += count
        first[signature] = min(first.get(signature, index), index)
    if callable(tell) and sum(counts.values()) != len(batches):
        raise ValueError(f"{type(batches).__name__}.batch_shapes() counts {sum(counts.values())} batches, but it "
                         f"has {len(batches)}")
    ranked = sorted(counts, key=lambda s: (-counts[s], first[s]))
    return [(signature, first[signature], counts[signature]) for signature in ranked]


def shape_buckets(counts: list[tuple[tuple, int, int]], limit: int | None = None) -> list[tuple[tuple, int]]:
    """(signature, index of its first batch) of the `limit` most frequent signatures of `counts` (shape_counts; None:
    all), most frequent first."""
    return [(signature, first) for signature, first, _ in counts[:limit]]


def graph_shapes(counts: list[tuple[tuple, int, int]], limit: int | None,
                 epochs: int | None) -> list[tuple[tuple, int]]:
    """The signatures the step captures, as (signature, index of its first batch), from the batches' shape_counts:
    the `limit` most frequent (Config.graph_limit), or with None every signature the run uses at least GRAPH_MIN_USES
    times (its batches times Config.epochs, one epoch when the run stops otherwise): a rarer one costs more to capture
    than it saves."""
    if limit is not None:
        return shape_buckets(counts, limit)
    return [(signature, first) for signature, first, count in counts if count * (epochs or 1) >= GRAPH_MIN_USES]


def id_capacity(counts: list[tuple[tuple, int, int]]) -> int:
    """The most elements of integer tensors in a batch of any of these shapes (shape_counts): a bound on the distinct
    ids a batch can hold, the rows each sparse table's pull and copy-out buffers are sized for."""
    return max((sum(math.prod(shape) for _, dtype, shape in signature
                    if not dtype.is_floating_point and dtype != torch.bool) for signature, _, _ in counts), default=1)


def host_count(batch: Any) -> int:
    """The examples or tokens a batch counts, read on the host: `batch["tokens"]` (an int), else its leading size."""
    if isinstance(batch, dict) and isinstance(batch.get("tokens"), int):
        return batch["tokens"]
    return batch_examples(batch)


class NotGraphable(RuntimeError):
    """The step cannot be replayed as a graph: it reads a value of the device on the host (a GPU sync; a graph would
    freeze its value), or its loss counts something else than the batch's host-side count."""


class HostReads(TorchDispatchMode):
    """Records the aten ops of a step that read tensor values on the host: scalar reads, data-dependent shapes, and
    copies from a device to the host (on the CPU the first two are what a GPU would wait for)."""

    READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
             torch.ops.aten.masked_select.default, torch.ops.aten.is_nonzero.default,
             torch.ops.aten._pack_padded_sequence.default}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.READS:
            self.reads.append(str(func.overloadpacket.__name__))
        elif func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            source = args[1] if func is torch.ops.aten.copy_.default else args[0]
            target = args[0].device if func is torch.ops.aten.copy_.default else kwargs.get("device")
            if isinstance(source, Tensor) and source.device.type != "cpu" and target is not None and \
                    torch.device(target).type == "cpu":
                self.reads.append("a copy to the host")
        return func(*args, **kwargs)


@dataclass
class Captured:
    """One signature's static inputs (a device copy of a batch of that shape) and, on a GPU, its graph."""

    static: Any  # the batch structure with static device tensors
    inputs: list[Tensor]  # the static tensors, in tensor_fields order
    staging: list[list[Tensor]]  # per slot, page-locked host copies of the inputs (GPU)
    graph: Any = None  # torch.cuda.CUDAGraph
    present: tuple[int, ...] = ()  # parameters that get a gradient in the captured step


@dataclass
class StepResult:
    """A step queued on the device; `resolve` (update thread) waits for its copy-out and reads it."""

    outbox: GradientOutbox
    slot: int
    present: tuple[int, ...]
    ids: list[Tensor]
    clock: PhaseClock
    count: int  # examples or tokens (host)
    eager: bool  # no graph for its shape

    def resolve(self) -> tuple[bool, float, list[Tensor | None], list[float]]:
        phases = self.clock.seconds()  # its last mark follows the copy to the host
        finite, loss, grads = self.outbox.read(self.slot, self.present, self.ids)
        return finite, loss, grads, phases


def _static_copy(batch: Any, device: torch.device) -> Any:
    """The batch with every tensor a fresh copy on `device` (never an alias of the batch's own memory)."""
    if isinstance(batch, Tensor):
        return batch.to(device, copy=True)
    if isinstance(batch, dict):
        return {key: _static_copy(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [_static_copy(value, device) for value in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


class StepGraphs:
    """A device worker's step on its private replica: prefetched pull, forward and backward, copy-out. With graphs
    (Config.graphed) its frequent batch shapes run as captured CUDA graphs on static inputs (on a CPU device: the same
    step called on the static inputs); without, every step runs eagerly on the batch moved to the device."""

    def __init__(self, model: nn.Module, loss_fn: Callable, device: torch.device, config: Config,
                 graphs: bool = True, capture: bool | None = None):
        self.device, self.cuda, self.loss_fn = device, device.type == "cuda", loss_fn
        self.graphed = graphs  # static inputs (and on a GPU graphs) for the shapes graph_shapes picks
        self.capture = graphs and (self.cuda if capture is None else capture)  # False: never captured
        self.shared, self.shared_buffers = trainable_parameters(model), list(model.buffers())
        self.replica = copy.deepcopy(model).to(device)  # private storage, ties kept, frozen values copied
        self.params = trainable_parameters(self.replica)
        self.tables = sparse_tables(self.replica)
        for table in self.tables.values():
            table.sparse = False  # dense on the device; copy_out sends the rows (a sparse gradient cannot be captured)
        self.sparse_pull = config.sparse_pull
        self.clip_norm, self.check = config.clip_norm, config.skip_nonfinite and config.clip_norm is None
        self.autocast = (torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
                         if config.amp == "bf16" else nullcontext())
        self.clocks = [PhaseClock(device), PhaseClock(device)]
        self.staged = SlotEvents(self.cuda)  # the page-locked inputs and ids a step writes, per slot (copy_out.py)
        self.graphs: dict[tuple, Captured] = {}
        self.outbox: GradientOutbox | None = None
        self.pull: PrefetchPull | None = None
        self.pool = torch.cuda.MemPool() if self.capture else None  # every graph's: capture.py counts its uses

    def prepare(self, batches: Any, counts: list[tuple[tuple, int, int]] | None = None,
                shapes: list[tuple[tuple, int]] | None = None) -> int:
        """Build the pull and the outbox (sized by the batches' ids: `counts`, shape_counts(batches) unless given),
        then, with graphs, capture `shapes` ((signature, index of a batch of it), as graph_shapes picks them for a run;
        None: every shape of `batches`), warm-up first; returns the number of graphs (on the CPU: of static-input
        signatures). Builds only the batches it captures: one per graph."""
        if counts is None and (self.tables or (self.graphed and shapes is None)):
            counts = shape_counts(batches)
        capacity = id_capacity(counts) if self.tables else 0
        rows = {i: capacity for i in self.tables} if self.sparse_pull else None
        self.pull = PrefetchPull(self.shared, self.params, self.shared_buffers, list(self.replica.buffers()),
                                 self.device, rows)
        self.outbox = GradientOutbox(self.params, self.tables, {i: capacity for i in self.tables}, self.device)
        if not self.graphed:
            return 0
        for signature, index in shape_buckets(counts) if shapes is None else shapes:
            self.graphs[signature] = self._capture(batches[index])
        return len(self.graphs)

    def warm_up(self, batch: Any) -> None:
        """One forward and backward on `batch`, no update (Config.compile compiles every shape in start-up)."""
        self._stage_ids(batch_ids(batch) if self.tables else None, 0)
        self._body(move_batch(batch, self.device, self.cuda))

    def _stage_ids(self, host_ids: Tensor | None, slot: int) -> list[Tensor]:
        """The batch's ids through host slot `slot` (outbox.step_ids), once that slot's last copies have run."""
        self.staged.writable(slot)
        ids = self.outbox.step_ids(host_ids, slot)
        self.staged.queued(slot)
        return ids

    def _body(self, batch: Any) -> tuple[tuple[int, ...], int]:
        """One step on the device, no host read: forward, backward, gather into the outbox; grads dropped again."""
        self.outbox.begin()
        loss, count = forward_backward(self.loss_fn, self.replica, batch, self.autocast)
        present = self.outbox.gather(loss, self.clip_norm, self.check)
        for param in self.params:
            param.grad = None  # the next step's backward writes them afresh (a graph: at its captured addresses)
        return present, count

    def _capture(self, batch: Any) -> Captured:
        static = _static_copy(batch, self.device)
        inputs = [t for _, t in tensor_fields(static)]
        staging = [[torch.empty_like(t, device="cpu").pin_memory() for t in inputs] for _ in range(2)] \
            if self.cuda else []
        captured = Captured(static, inputs, staging)
        self._stage_ids(batch_ids(batch) if self.tables else None, 0)
        with HostReads() as probe:
            _, count = self._body(static)  # also the warm-up's first step
        if probe.reads:
            raise NotGraphable(f"Config.graphs: the step reads the device on the host ({', '.join(probe.reads[:3])}): "
                               f"a CUDA graph cannot replay that; give the workers a loss without host reads (the "
                               f"models' padded=True losses)")
        if count != host_count(batch):
            raise NotGraphable(f"Config.graphs: the loss counts {count} for a batch whose host-side count is "
                               f"{host_count(batch)} (batch['tokens'], else its leading size); a graph replays "
                               f"without calling the loss, so its count must be that one")
        if self.capture:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS - 1):
                    self._body(static)
            torch.cuda.current_stream().wait_stream(side)
            captured.graph, (captured.present, _) = capture_graph(lambda: self._body(static), self.pool)
        return captured

    def run(self, batch: Any, slot: int, clock: PhaseClock) -> StepResult:
        """Queue one step on the host batch `batch` (graph replay, or eager when its shape has none), then its
        copy-out to host slot `slot`; nothing here waits for the device but the page-locked staging of `slot`, for
        the copies two steps ago (SlotEvents: normally long done)."""
        self.staged.writable(slot)
        ids = self.outbox.step_ids(self.pull.ids_of(batch) if self.tables else None, slot)
        captured = self.graphs.get(batch_signature(batch)) if self.graphs else None
        for index, (static, (_, source)) in enumerate(zip(captured.inputs, tensor_fields(batch)) if captured else ()):
            if self.cuda:  # through page-locked memory: an asynchronous copy
                staged = captured.staging[slot][index]
                staged.copy_(source)
                static.copy_(staged, non_blocking=True)
            else:
                static.copy_(source)
        self.staged.queued(slot)
        if captured is None:
            present, count = self._body(move_batch(batch, self.device, self.cuda))
        else:
            if captured.graph is not None:
                captured.graph.replay()
                present = captured.present
            else:
                present, _ = self._body(captured.static)
            count = host_count(batch)
        clock.mark()
        self.pull.push_buffers()
        self.outbox.send(slot, [len(chosen) for chosen in ids])
        clock.mark(self.outbox.copy_stream)
        return StepResult(self.outbox, slot, present, ids, clock, count, captured is None)
