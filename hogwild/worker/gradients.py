"""The arithmetic of one training step, shared by the Hogwild worker (worker.py) and the sync worker (sync.py): a
batch's RNG seed and loss, the gradients' global norm, clipping and finiteness, and the count of skipped steps.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes. Nothing here talks to another process.

Usage: `seed_batch(device, batch_seed(seed, epoch, index))`; `loss, examples = forward_backward(loss_fn, model, batch)`;
`usable = usable_gradients(params, clip_norm)` (sync) or `usable, scale, loss = gradient_stats(params, check,
clip_norm, loss)` (a 'cpu' Hogwild worker: in_place.py; a device worker's step reads these on the device: copy_out.py).

A faster step (Config.compile, Config.tf32; eager FP32 stays the default and the reference, Config's docstring says
what each option trades): `step = compiled_loss(spec.loss_fn, config.compile)`, then `forward_backward(step, net,
batch)`;
`use_tf32(config.tf32)` once in the worker process.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


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


def forward_backward(loss_fn: Callable, model: nn.Module, batch: Any,
                     autocast: contextlib.AbstractContextManager = contextlib.nullcontext()) -> tuple[torch.Tensor, int]:
    """A step's forward (under `autocast`: Config.amp) and backward, the gradients left in the parameters' .grad;
    returns (loss, examples or tokens). The one call of backward() of every worker step (device_step.py, in_place.py,
    sync.py)."""
    with autocast:
        loss, count = call_loss(loss_fn, model, batch)
    loss.backward()
    return loss, count


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


def gradient_stats(params: list[torch.Tensor], check: GradientCheck | None, clip_norm: float | None,
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



def scale_gradients(grads: list[torch.Tensor | None], scale: float) -> None:
    """grads *= scale in place, dense and sparse (torch.nn.utils.clip_grad_norm_'s scaling)."""
    dense = [g for g in grads if g is not None and not g.is_sparse]
    if dense:
        torch._foreach_mul_(dense, scale)
    for grad in grads:
        if grad is not None and grad.is_sparse:
            grad._values().mul_(scale)


# Compilations allowed per code object before dynamo falls back to eager for new shapes (torch's default is 8): a
# sequence model's decoder loop compiles once per target length bucket, and a worker should never fall back
# silently after its first eight buckets.
RECOMPILE_LIMIT = 64


def compiled_loss(loss_fn: Callable, mode: str) -> Callable:
    """loss_fn itself for mode 'off'; else loss_fn(model, batch) compiled with torch.compile (mode 'default' or
    'reduce-overhead'; 'aot_eager' traces and runs the captured graphs without generating code). Dynamo splits the
    step where it cannot trace (host reads, packed RNNs) and compiles the pieces in between; a new batch shape
    compiles again (a changed size first makes that dimension dynamic, a changed loop count never can)."""
    if mode == "off":
        return loss_fn

    def step(model: torch.nn.Module, batch: Any) -> Any:
        return loss_fn(model, batch)  # a plain function, so that any callable loss (a class instance) compiles

    dynamo = torch._dynamo.config
    if dynamo.recompile_limit < RECOMPILE_LIMIT:
        dynamo.recompile_limit = RECOMPILE_LIMIT
    if mode == "aot_eager":
        return torch.compile(step, backend="aot_eager")
    return torch.compile(step, mode=mode)


def use_tf32(enabled: bool) -> None:
    """TF32 (or not) for the CUDA matrix products of this process (cuDNN's convolutions and RNNs keep torch's
    default, TF32 allowed); CPU arithmetic never changes. The legacy flag, as bench/gpu_timing.py sets it: torch
    refuses to read a TF32 setting made through both its legacy and its new (fp32_precision) interface."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
