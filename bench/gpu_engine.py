"""The engine side of bench_gpu.py: run.py's engine configuration for each engine variant, with the bench's TF32
setting and --engine-option's hogwild.Config fields over it, and one timed hogwild.train run of the batches.

A run is timed over its steady window by its workers' own update counters (gpu_timing.steady_records: the metrics
records of every parent tick), an eager and a graphed worker step alike; the run clock (updates over the seconds
from when every worker was ready) only when its records span no window (a run of a few ticks), and said. It records
which step the workers ran (`engine_step`), with the graphs captured and the steps the graphed workers ran eagerly
(TrainResult.eager_steps and eager_share). A run that does not train every batch raises IncompleteRun rather than being
timed.

Usage: `config = engine_config(options, "cuda:0", 2, "engine", engine_overrides(["update_threads=4"]))`;
`measurement = run_engine("nmt", "engine", model, nmt_loss, batches, config, nvml=True)`
"""
from __future__ import annotations

import copy
import dataclasses
import time

from torch import nn

import hogwild
from bench.gpu_report import Measurement
from bench.gpu_timing import sampler_for, steady_records
from hogwild.tasks.options import RunOptions
from hogwild.worker.replica import torch_device
from hogwild.worker.step_graph import graph_shapes, shape_counts

ENGINE = {"engine": {}, "engine-bf16": {"amp": "bf16"},
          "engine-compiled": {"compile": "reduce-overhead", "hang_timeout": None}}  # Config fields per variant
BENCH_SET = ("devices", "workers", "epochs", "max_steps", "time_limit", "eval_every", "eval_every_seconds",
             "checkpoint_dir", "progress", "tensorboard", "log_every", "resume")  # Config fields the bench sets
RECIPE = ("optimizer", "lr", "optimizer_args", "clip_norm", "lr_schedule", "decay_per_epoch", "decay_updates",
          "warmup_steps", "min_lr", "seed", "tf32")  # Config fields every side shares: run.py's flags set them


class IncompleteRun(RuntimeError):
    """An engine run that did not train every batch: it is reported, not timed."""


def engine_config(options: RunOptions, device: str, workers: int, variant: str = "engine",
                  overrides: dict | None = None) -> hogwild.Config:
    """run.py's engine configuration for `workers` workers on `device` (its --tf32 as the plain loops have it), the
    variant's fields and --engine-option's over it; one epoch of the batches, nothing written, a metrics record every
    tick (the timing: log_every=1). A ConfigError names a refused field."""
    config = options.engine_config([device] * workers, "accuracy")
    return dataclasses.replace(config, epochs=1, max_steps=None, time_limit=None, eval_every=None,
                               eval_every_seconds=None, checkpoint_dir=None, progress=False, tensorboard=False,
                               log_every=1, **{**ENGINE[variant], **(overrides or {})})


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
                             f"(--optimizer, --lr, --recipe, --seed, --tf32)")
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


def run_engine(task: str, variant: str, model: nn.Module, loss_fn, batches: list[dict], config: hogwild.Config,
               nvml: bool) -> Measurement:
    """hogwild.train of one epoch of `batches` on a copy of `model`, timed over its steady window."""
    offset = time.time() - time.perf_counter()  # the records' clock against the sampler's
    with sampler_for(torch_device(config.devices[0]), nvml) as sampler:
        result = hogwild.train(copy.deepcopy(model), loss_fn, batches, config)
    if result.updates != len(batches):  # one epoch, nothing asked to stop it
        raise IncompleteRun(f"the run ended after {result.updates} of {len(batches)} updates (stop reason "
                            f"{result.stop_reason!r}, per worker {result.worker_updates}, {result.wall_seconds:.1f} s)")
    window = steady_records(result.records[:-1], result.updates)  # the last record follows the join
    if window is not None:
        rate, tokens_rate, ms, timed, timing = (window.rate, window.tokens_rate, window.phase_ms, window.updates,
                                                "counters")
        gpu = sampler.mean(window.start - offset, window.end - offset) if nvml else None
    else:
        rate, ms, timed, timing = result.updates / result.wall_seconds, dict(result.phase_ms), result.updates, \
            "run clock"
        tokens_rate, gpu = result.examples / result.wall_seconds, sampler.mean(0.0, float("inf")) if nvml else None
    if not nvml:  # the device's share of the window if it ran one phase at a time
        gpu = min(rate * (ms["pull"] + ms["compute"] + ms["push"]) / 10, 100.0)
    return Measurement(task, variant, len(config.devices), rate, tokens_rate,
                       "bf16" if config.amp == "bf16" else "fp32", result.skipped_updates, gpu,
                       "nvml" if nvml else "span", ms, graphs=result.graphs, eager_steps=result.eager_steps,
                       updates=result.updates, window=timed, timing=timing, step=engine_step(config, result, batches),
                       eager_share=result.eager_share)


def engine_step(config: hogwild.Config, result: hogwild.TrainResult, batches: list) -> str:
    """Which step the workers ran: 'graphed'; 'eager' (the configuration asks for no graphs, or compiles); 'no shape
    graphed' (graphs asked for, but no batch shape is used often enough to get one); or, where workers captured none
    of the graphs every worker's batches call for (a worker whose capture fails captures none and runs the eager
    step), 'fell back to eager' (all of them) or 'F of K fell back'."""
    workers = len(config.devices)
    if not config.graphed(config.devices[0]):
        return "eager"
    each = len(graph_shapes(shape_counts(batches), config.graph_limit, config.epochs))  # every worker: all the batches
    if each == 0:
        return "no shape graphed"
    fell = workers - result.graphs // each
    if fell == 0:
        return "graphed"
    return "fell back to eager" if fell == workers else f"{fell} of {workers} fell back"
