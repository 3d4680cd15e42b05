"""The plain single-device training loops bench_gpu.py measures the engine against: the eager loop a user writes
first, and the best one, with forward, backward, clipping and the fused optimizer step captured as one CUDA graph per
batch shape (length bucket) and replayed on static input buffers.

Both apply run.py's recipe (optimizer, lr, clipping) to a model on one device and apply every step. A step whose loss
is not finite is counted on the device (with clipping, a step whose gradient norm is not finite). The count is read
once, at the end.

The graphed loop (`BucketGraphs`) follows PyTorch's CUDA-graph notes on whole-network capture:
  - `prepare(batches)` runs before the timed steps. It groups the batches by shape. Each shape whose length
    dimensions all sit on the bucket edges gets static device buffers holding its first batch, then WARMUP_STEPS steps
    on a side stream (cuDNN/cuBLAS plans, the optimizer's state; on the CPU, where nothing is captured, one step).
    The parameters and the optimizer state are then put back as they were, and the step is captured. All graphs share
    one memory pool: they never run concurrently, and each writes its gradients before it reads them, so their private
    memory may overlap.
  - `step(batch)` copies the batch into its shape's static buffers (non-blocking from pinned memory) and replays the
    graph. A shape without a graph (a length past the last edge) runs the same step eagerly and is counted (`eager`).
On the CPU nothing is captured. `prepare` builds the same static buffers, and `step` copies into them and calls the
step function directly, so the CPU tests exercise everything but the capture.

A graph replays work fixed at capture, so the graphed loop needs three things:
  - a loss that reads nothing from the device (the models' padded losses);
  - an optimizer step that never waits for the host: fused SGD keeps no state and takes a float lr; Adam is built
    with capturable=True (its step count on the device);
  - dense gradients. POS's sparse embedding tables are switched to dense gradients (`dense_embeddings`). SGD's update
    stays the same; with Adam, the moments of every row then decay each step, where the engine's lazy Adam leaves
    unused rows alone.
bf16 puts the forward under torch.autocast(bfloat16) with cache_enabled=False, because a cached weight cast would not
be refreshed by a replay.

Usage:
    step = PlainStep(model, functools.partial(nmt_loss, padded=True), optimizers, clip_norm=1.0)
    graphs = BucketGraphs(step, torch.device("cuda"), LENGTH_EDGES["nmt"])
    graphs.prepare(batches)                  # capture (GPU) or static buffers (CPU), before the timed steps
    for batch in batches: graphs.step(batch)
    bad, eager = int(step.nonfinite), graphs.eager
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import Tensor, nn

from hogwild.worker.capture import capture_graph
from hogwild.worker.replica import move_batch, sparse_tables

WARMUP_STEPS = 3  # eager steps on a side stream before a capture
PLAIN_OPTIMIZERS = ("sgd", "adam")  # the plain loops' optimizers (torch's fused GPU kernels)


def plain_optimizers(model: nn.Module, optimizer: str, lr: float, device: torch.device,
                     capturable: bool = False) -> list[torch.optim.Optimizer]:
    """What a user writes: the fused kernel on a GPU for the dense parameters; the sparse embedding tables (sparse
    gradients, which fused kernels refuse) with plain SGD, or SparseAdam (lazy moments, as the engine's Adam).
    capturable: Adam keeps its step count on the device, so that a CUDA graph can capture its step."""
    if optimizer not in PLAIN_OPTIMIZERS:
        raise ValueError(f"the plain loop takes {' or '.join(PLAIN_OPTIMIZERS)}, got {optimizer!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    tables = set(sparse_tables(model))
    dense = [p for i, p in enumerate(params) if i not in tables]
    sparse = [p for i, p in enumerate(params) if i in tables]
    fused = {"fused": True} if device.type == "cuda" else {}
    if optimizer == "sgd":
        out = [torch.optim.SGD(dense, lr=lr, **fused)]
        return out + ([torch.optim.SGD(sparse, lr=lr)] if sparse else [])
    out = [torch.optim.Adam(dense, lr=lr, capturable=capturable, **fused)]
    return out + ([torch.optim.SparseAdam(sparse, lr=lr)] if sparse else [])


def dense_embeddings(model: nn.Module) -> nn.Module:
    """The model with every embedding table's gradient dense (a graph cannot capture a sparse gradient's variable
    number of rows); the parameters are the same."""
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
            module.sparse = False
    return model


class PlainStep:
    """One step of the plain loop on a batch already on the device: loss (under bf16 autocast if asked), backward,
    clipping, the non-finite count, every optimizer's step. The caller clears the gradients first (`zero_grad`)
    except in a graph's replay, whose backward writes them anew."""

    def __init__(self, model: nn.Module, loss_fn: Callable, optimizers: list[torch.optim.Optimizer],
                 clip_norm: float | None, bf16: bool = False):
        self.model, self.loss_fn, self.optimizers, self.clip_norm = model, loss_fn, optimizers, clip_norm
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.device = self.params[0].device
        self.nonfinite = torch.zeros((), dtype=torch.int64, device=self.device)  # outside any graph's pool
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)) \
            if bf16 else nullcontext

    def zero_grad(self) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def __call__(self, batch: dict) -> None:
        with self.autocast():
            loss, _ = self.loss_fn(self.model, batch)
        loss.backward()
        if self.clip_norm is not None:
            self.nonfinite += ~torch.isfinite(torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm))
        else:
            self.nonfinite += ~torch.isfinite(loss.detach())
        for optimizer in self.optimizers:
            optimizer.step()


def eager_steps(step: PlainStep, batches: list, spans=None) -> None:
    """The eager loop: each batch copied to the device (non-blocking), the gradients cleared, one step."""
    for batch in batches:
        if spans is not None:
            spans.start()
        on_device = move_batch(batch, step.device, non_blocking=True)
        step.zero_grad()
        step(on_device)
        if spans is not None:
            spans.end()


def batch_shape(batch: dict) -> tuple:
    """A batch's shape signature: (field, shape) of every tensor field; host-side fields (`tokens`) do not count."""
    return tuple((key, tuple(value.shape)) for key, value in sorted(batch.items()) if isinstance(value, Tensor))


def on_edges(batch: dict, edges: tuple[int, ...]) -> bool:
    """Whether every length dimension of the batch (dim 1 of each tensor of 2+ dims) is a bucket edge."""
    return all(value.shape[1] in edges for value in batch.values() if isinstance(value, Tensor) and value.dim() >= 2)


class BucketGraphs:
    """One step per bucket shape: a CUDA graph replayed on static buffers on a GPU, the step function called on the
    same buffers on the CPU (module docstring)."""

    def __init__(self, step: PlainStep, device: torch.device, edges: tuple[int, ...]):
        self.run, self.device, self.edges = step, device, tuple(edges)
        self.capture = device.type == "cuda"
        self.static: dict[tuple, dict] = {}  # shape -> the static input buffers on the device
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.pool = torch.cuda.MemPool() if self.capture else None  # capture.py counts its uses
        self.eager = 0  # steps run eagerly: their shape has no graph

    def prepare(self, batches: list[dict]) -> int:
        """Static buffers, a warm-up and (on a GPU) a captured graph for each bucket shape among the batches. Called
        before the first step; it leaves the parameters as they were, the optimizer state at its start and the
        non-finite count at 0. Returns the number of shapes prepared."""
        firsts: dict[tuple, dict] = {}
        for batch in batches:
            if on_edges(batch, self.edges):
                firsts.setdefault(batch_shape(batch), batch)
        initial = [p.detach().clone() for p in self.run.params]
        for shape, batch in firsts.items():
            static = {key: value.to(self.device, copy=True) if isinstance(value, Tensor) else value
                      for key, value in batch.items()}
            self._warm_up(static)
            self._restore(initial)
            if self.capture:
                self.run.zero_grad()  # backward inside the capture allocates the gradients from the graph's pool
                # a failed capture raises CaptureFailed with the process left healthy (hogwild/worker/capture.py)
                self.graphs[shape], _ = capture_graph(lambda: self.run(static), self.pool)
            self.static[shape] = static
        return len(firsts)

    def _warm_up(self, static: dict) -> None:
        """WARMUP_STEPS eager steps on the static buffers: on a side stream on a GPU, as capture needs."""
        side = torch.cuda.Stream(self.device) if self.capture else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(self.device))
        with (torch.cuda.stream(side) if side is not None else nullcontext()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*capturable=True.*")  # Adam's warm-up runs uncaptured
            for _ in range(WARMUP_STEPS):
                self.run.zero_grad()
                self.run(static)
        if side is not None:
            torch.cuda.current_stream(self.device).wait_stream(side)

    @torch.no_grad()
    def _restore(self, initial: list[Tensor]) -> None:
        """Undo a warm-up: the parameters as they were, the optimizer state at its start (zeros: Adam's moments and
        step count), the non-finite count at 0; all in place, where a graph will read them."""
        for param, value in zip(self.run.params, initial):
            param.copy_(value)
        for optimizer in self.run.optimizers:
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, Tensor):
                        value.zero_()
        self.run.nonfinite.zero_()

    def step(self, batch: dict) -> None:
        """One training step on the host batch: copied into its shape's static buffers and replayed (on the CPU: the
        step called on them), or run eagerly when its shape has none."""
        shape = batch_shape(batch)
        static = self.static.get(shape)
        if static is None:
            self.eager += 1
            self.run.zero_grad()
            self.run(move_batch(batch, self.device, non_blocking=True))
            return
        for key, value in batch.items():
            if isinstance(value, Tensor):
                static[key].copy_(value, non_blocking=True)
        if self.capture:
            self.graphs[shape].replay()
        else:
            self.run.zero_grad()
            self.run(static)
