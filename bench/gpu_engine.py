"""The engine side of bench_gpu.py: run.py's engine configuration for each engine variant, --engine-option's
hogwild.Config fields over it, and one timed hogwild.train run of the batches.

A run is timed by its loss function, which stamps each batch's start (gpu_timing.StampedLoss). A graphed worker step
replays without calling the loss, so a run with fewer than half of its batches stamped is timed by its training clock
instead ('run clock': updates over the seconds from when every worker was ready). A run that does not train every
batch raises IncompleteRun rather than being timed.

Usage: `config = engine_config(options, "cuda:0", 2, "engine", engine_overrides(["update_threads=4"]))`;
`measurement = run_engine("nmt", "engine", model, nmt_loss, batches, tokens, config, nvml=True)`
"""
from __future__ import annotations

import copy
import dataclasses
import statistics

import torch
from torch import nn

import hogwild
from bench.gpu_report import Measurement
from bench.gpu_timing import StampedLoss, sampler_for, steady_tokens, steady_window
from hogwild.tasks.options import RunOptions
from hogwild.worker.replica import torch_device

ENGINE = {"engine": {}, "engine-tf32": {"tf32": True}, "engine-bf16": {"amp": "bf16"},
          "engine-compiled": {"compile": "reduce-overhead", "hang_timeout": None}}  # Config fields per variant
BENCH_SET = ("devices", "workers", "epochs", "max_steps", "time_limit", "eval_every", "eval_every_seconds",
             "checkpoint_dir", "progress", "tensorboard", "log_every", "resume")  # Config fields the bench sets
RECIPE = ("optimizer", "lr", "optimizer_args", "clip_norm", "lr_schedule", "decay_per_epoch", "decay_updates",
          "warmup_steps", "min_lr", "seed")  # Config fields of the recipe every side shares: run.py's flags set them


class IncompleteRun(RuntimeError):
    """An engine run that did not train every batch: it is reported, not timed."""


def engine_config(options: RunOptions, device: str, workers: int, variant: str = "engine",
                  overrides: dict | None = None) -> hogwild.Config:
    """run.py's engine configuration for `workers` workers on `device`, the variant's fields and --engine-option's
    over it; one epoch of the batches, nothing written (a ConfigError names a refused field)."""
    config = options.engine_config([device] * workers, "accuracy")
    return dataclasses.replace(config, epochs=1, max_steps=None, time_limit=None, eval_every=None,
                               eval_every_seconds=None, checkpoint_dir=None, progress=False, tensorboard=False,
                               log_every=10 ** 9, **{**ENGINE[variant], **(overrides or {})})


def engine_overrides(pairs: list[str]) -> dict:
    """--engine-option FIELD=VALUE pairs -> Config field values, each converted by its field's type; a ValueError
    names the pair and says why it is refused."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(hogwild.Config)}
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair!r}: expected FIELD=VALUE")
        if name not in fields:
            raise ValueError(f"{name!r} is not a hogwild.Config field (one of: {', '.join(sorted(fields))})")
        if name in BENCH_SET:
            raise ValueError(f"{name!r} is set by the bench (one epoch of the batches on the variant's workers)")
        if name in RECIPE:
            raise ValueError(f"{name!r} belongs to the recipe every side shares: set it with run.py's flags "
                             f"(--optimizer, --lr, --recipe, --seed)")
        kind = fields[name]
        if text.lower() == "none" and "None" in kind:
            out[name] = None
        elif kind.startswith("bool"):
            if text.lower() not in ("true", "false", "on", "off", "1", "0"):
                raise ValueError(f"{name}={text}: expected true or false")
            out[name] = text.lower() in ("true", "on", "1")
        elif kind.split(" ")[0] in ("int", "float", "str"):
            try:
                out[name] = {"int": int, "float": float, "str": str}[kind.split(" ")[0]](text)
            except ValueError:
                raise ValueError(f"{name}={text}: expected {kind}") from None
        else:
            raise ValueError(f"{name} ({kind}) cannot be set from the command line")
    return out


def run_engine(task: str, variant: str, model: nn.Module, loss_fn, batches: list[dict], tokens: list[int],
               config: hogwild.Config, nvml: bool) -> Measurement:
    """hogwild.train of one epoch of `batches` (each with its 'index') on a copy of `model`; tokens[i]: batch i's
    target tokens."""
    stamps = torch.zeros(len(batches), dtype=torch.float64).share_memory_()
    with sampler_for(torch_device(config.devices[0]), nvml) as sampler:
        result = hogwild.train(copy.deepcopy(model), StampedLoss(loss_fn, stamps), batches, config)
    if result.updates != len(batches):  # one epoch, nothing asked to stop it
        raise IncompleteRun(f"the run ended after {result.updates} of {len(batches)} updates (stop reason "
                            f"{result.stop_reason!r}, per worker {result.worker_updates}, {result.wall_seconds:.1f} s)")
    if int((stamps > 0).sum()) >= len(batches) // 2:
        rate, t0, t1 = steady_window(stamps)
        tokens_rate, timing = steady_tokens(stamps, tokens), "stamps"
    else:  # the training clock, from when every worker was ready
        rate, t0, t1 = result.updates / result.wall_seconds, 0.0, float("inf")
        tokens_rate, timing = rate * statistics.fmean(tokens), "run clock"
    ms = result.phase_ms
    gpu = sampler.mean(t0, t1) if nvml else rate * (ms["pull"] + ms["compute"] + ms["push"]) / 10
    return Measurement(task, variant, len(config.devices), rate, tokens_rate,
                       "bf16" if config.amp == "bf16" else "fp32", result.skipped_updates, gpu,
                       "nvml" if nvml else "span", dict(ms), timing=timing)
