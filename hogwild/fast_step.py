"""How a worker's step runs fast: torch.compile of the loss function (Config.compile) and TF32 matrix products
(Config.tf32). Eager FP32 stays the default and the reference (Config's docstring says what each option trades).

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage (worker.py): `step = compiled_loss(spec.loss_fn, config.compile)`, then `call_loss(step, net, batch)`;
`use_tf32(config.tf32)` once in the worker process.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

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
