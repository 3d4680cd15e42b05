"""GPU benchmark: the best plain single-GPU PyTorch loop (one CUDA graph per length bucket) and the eager one, against
the engine's workers sharing that GPU.

Usage (one GPU):   python -m bench.bench_gpu --device cuda:0 --tasks nmt --worker-counts 1,2,4
Without a GPU:     python -m bench.bench_gpu --device cpu --quick      (seconds; the same code paths on the CPU)

Every side trains the same model from the same initial weights, on the same sentences, with run.py's recipe for the
preset, and in the same precision: TF32 matrix products off on every row, the plain loops' and the engine's workers'
alike (--tf32: on for every row; the header says which). Of run.py's options it takes --preset, --recipe,
--optimizer, --lr, --batch-size, --vocab-size, --threads-per-worker, --seed and --tf32 (or --config FILE's). --preset paper with --recipe paper is the paper's recipe: POS
SGD 0.03 with sparse embedding gradients and one sentence per update; NMT SGD 0.1 with the gradient norm clipped at
1.0 and 64 pairs per update. --optimizer adam swaps the optimizer on every side. Batches hold random ids with
corpus-like lengths (bench/corpus_batches.py: Brown, and Europarl fr-en under $HOGWILD_CORPORA, else a gamma fit),
each with its host-side `tokens`. The graphed rows get the same batches with their lengths padded to bucket edges
(corpus_batches.LENGTH_EDGES), so that shapes repeat. A run makes --updates updates (750: a steady window of 600).

Variants (--variants). The plain loops (bench/plain_loop.py) run the model and optimizer on the device and apply every
step; torch's fused optimizer runs on a GPU.
  plain               the eager loop, packed path: the reference row of earlier figures
  plain-graphed       forward + backward + clip + fused step captured as one CUDA graph per bucket shape (the padded
                      losses; POS embedding gradients dense), replayed on static buffers
  plain-graphed-bf16  the same under bf16 autocast
The engine runs hogwild.train with K workers sharing the device, K from --worker-counts, with run.py's engine options.
On a GPU these are page-locked shared parameters, the update on the CPU overlapped with the next step, and the fused
CPU optimizer kernel. Engine runs skip non-finite steps. --engine-option k=v sets any other hogwild.Config field in
every engine run (e.g. update_threads=4, overlap_update=false, pull_every=8).
  engine              the padded loss on the bucketed batches, as run.py --gpus trains with its default --graphs
                      auto (a graphed worker step); --engine-loss packed: the packed loss, an eager step. A run whose
                      workers did not all capture the graphs their batches call for (a failed capture: the worker
                      runs the eager step) is its own row, 'engine (fell back to eager)' or 'engine (1 of 4 fell
                      back)', as is one with no shape used often enough for a graph; never counted as the engine's
  engine-bf16         the same with the workers' forward under bf16 autocast (Config.amp)
  engine-compiled     the workers' step compiled (Config.compile='reduce-overhead') on the bucketed batches, with the
                      hang watch off (Config.hang_timeout=None): a compile takes minutes
A run that fails (a worker failed, a capture failed, any error, the run stopped early) is printed as NOT MEASURED
with the reason, and the other runs still go ahead. Each variant runs --repeats times, the engine with 2+ workers
--repeats-shared times, with the order rotating by one run each repeat.

Printed per variant: updates/s (median and range), target tokens/s, the ratios to the eager plain loop and to the
graphed plain loop of the same precision, the updates timed, non-finite steps (plain: counted on the device; engine:
skipped updates), the GPU's utilisation over the same window (NVML when pynvml is installed; else 'span', the share
of wall time covered by the steps' CUDA-event spans or the engine's phases, which counts launch gaps inside a step as
busy), graphs captured, steps run eagerly and their share, and the engine's phases in ms per update over the window:
pull, compute, push, CPU update. Every rate counts the steady window, the middle 80% of the updates, so start-up,
spawning, capture and the join are excluded alike (gpu_timing.py): the plain loops' steps are timed where the device
runs them (CUDA events), the engine's by its workers' own update counters, read every tick, the same for an eager and
a graphed worker step (a run too short for a window is timed by its training clock, marked 'run clock'). Then comes
a projection to 1..4 GPUs with one worker each (bench/gpu_report.py), beside the paper's Table 1. --json writes every
run (after each run). The command is printed first and last.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import hogwild
from bench import command_line
from bench.bench_models import POS_VOCAB
from bench.corpus_batches import CORPUS, LENGTH_EDGES, bucketed, corpus_lengths, fallback_lengths, make_batch, \
    pad_to_edges
from bench.gpu_engine import ENGINE, IncompleteRun, engine_config, engine_overrides, run_engine
from bench.gpu_report import Measurement, report, save
from bench.gpu_timing import StepSpans, UtilisationSampler, sampler_for, steady_tokens, steady_window
from bench.plain_loop import PLAIN_OPTIMIZERS, BucketGraphs, PlainStep, dense_embeddings, eager_steps, \
    plain_optimizers
from hogwild.data.corpora import corpora_dir
from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset
from hogwild.tasks.options import RunOptions
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options
from hogwild.worker.gradients import use_tf32
from hogwild.worker.replica import torch_device
from hogwild.worker.worker import device_options

PLAIN = {"plain": dict(graphed=False, bf16=False), "plain-graphed": dict(graphed=True, bf16=False),
         "plain-graphed-bf16": dict(graphed=True, bf16=True)}
VARIANTS = (*PLAIN, *ENGINE)
DEFAULT_VARIANTS = "plain,plain-graphed,plain-graphed-bf16,engine"
UPDATES = 750  # per run: a steady window (the middle 80%) of 600 updates
RUN_OPTIONS = ("preset", "recipe", "optimizer", "lr", "batch_size", "vocab_size", "threads_per_worker", "seed", "tf32")
RUN_DEFAULTS = {"preset": "paper", "recipe": "paper"}
QUICK_RUN_DEFAULTS = {"recipe": "paper", "vocab_size": 500}  # and run.py's --preset, small
QUICK = dict(updates=20, repeats=1, repeats_shared=1, worker_counts="1,2")  # --quick's own defaults
QUICK_NMT_BATCH = 4


@dataclasses.dataclass
class Batches:
    """A task's batches: exact lengths, and padded to the length buckets."""

    exact: list[dict]
    bucketed: list[dict]
    tokens: list[int]  # per batch: the target tokens it trains
    lengths: str  # where the lengths came from, and their means


def build(task: str, options: RunOptions, count: int, corpora: Path, seed: int) -> tuple[nn.Module, Batches]:
    """(the model on the CPU, as the job builders build it, the batches)."""
    rng, g = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    try:
        found = corpus_lengths(task, corpora)
        why = f"{CORPUS[task]} not at {corpora}"
    except ImportError as error:  # the corpus is there, its reader's module (sacremoses) is not
        found, why = None, f"{CORPUS[task]} unreadable: {error}"
    lengths, source = found or (fallback_lengths(task, 100_000, rng), f"a gamma fit ({why})")
    plan = bucketed(lengths, options.batch_size, count, rng)
    exact = [make_batch(task, lens, options.vocab_size, g) for lens in plan]
    padded = [pad_to_edges(batch, LENGTH_EDGES[task]) for batch in exact]
    torch.manual_seed(seed)
    if task == "pos":  # as the job builders (tasks.pos_task: sparse embedding gradients; tasks.nmt_task) build them
        model = POSTagger(pos_preset(options.preset, **POS_VOCAB, dropout=options.dropout, sparse_embeddings=True))
    else:
        model = AttentionNMT(nmt_preset(options.preset, src_words=options.vocab_size, tgt_words=options.vocab_size,
                                        dropout=options.dropout))
    flat = np.concatenate(plan)
    means = " / ".join(f"{m:.1f}" for m in np.atleast_1d(flat.mean(0)))
    return model, Batches(exact, padded, [b["tokens"] for b in exact], f"lengths from {source}, mean {means} words")


def task_loss(task: str, padded: bool):
    """The model's loss: the packed path, or the padded one (no host read: what a graph captures)."""
    loss = pos_loss if task == "pos" else nmt_loss
    return functools.partial(loss, padded=True) if padded else loss


# ---------------------------------------------------------------- the plain loops (the engine's: gpu_engine.py)
def run_plain(task: str, variant: str, model: nn.Module, batches: Batches, device: torch.device, options: RunOptions,
              nvml: bool) -> Measurement:
    """A plain loop on one device, in this process, on a copy of `model`."""
    graphed, bf16 = PLAIN[variant]["graphed"], PLAIN[variant]["bf16"]
    host = batches.bucketed if graphed else batches.exact
    if device.type == "cuda":  # pinned: the copy to the device does not wait for the host
        host = [{k: v.pin_memory() if torch.is_tensor(v) else v for k, v in b.items()} for b in host]
    model = copy.deepcopy(model)
    model = (dense_embeddings(model) if graphed else model).to(device)
    optimizers = plain_optimizers(model, options.optimizer, options.lr, device,
                                  capturable=graphed and device.type == "cuda")
    step = PlainStep(model, task_loss(task, graphed), optimizers, options.clip_norm, bf16=bf16)
    graphs, prepared, began = None, None, time.perf_counter()
    if graphed:
        graphs = BucketGraphs(step, device, LENGTH_EDGES[task])
        prepared = graphs.prepare(host)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    prepare_s = time.perf_counter() - began
    with sampler_for(device, nvml) as sampler:
        spans = StepSpans(device)
        if graphs is None:
            eager_steps(step, host, spans)
        else:
            for batch in host:
                spans.start()
                graphs.step(batch)
                spans.end()
        seconds, stamps = spans.seconds(), spans.starts()  # both wait for the device
    rate, t0, t1 = steady_window(stamps)
    steady = seconds[len(seconds) // 10:max(9 * len(seconds) // 10, 1)]
    gpu = sampler.mean(t0, t1) if nvml else min(100 * rate * statistics.fmean(steady), 100.0)  # one step at a time
    nonfinite, eager = int(step.nonfinite), (graphs.eager if graphs is not None else None)
    del model, optimizers, step, graphs
    release(device)
    return Measurement(task, variant, 1, rate, steady_tokens(stamps, batches.tokens), "bf16" if bf16 else "fp32",
                       nonfinite, gpu, "nvml" if nvml else "span", graphs=prepared, eager_steps=eager,
                       prepare_s=prepare_s if graphed else None, updates=len(host),
                       window=round(rate * (t1 - t0)), eager_share=eager / len(host) if graphed else None)


def release(device: torch.device) -> None:
    """Give a finished run's cached device memory back, before the next run."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build_parser(quick: bool = False) -> argparse.ArgumentParser:
    """The bench's flags; quick: --quick's defaults (main checks the command line for --quick first, so that
    --help shows the defaults that apply)."""
    p = argparse.ArgumentParser(prog="python -m bench.bench_gpu", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    add_run_options(p, only=RUN_OPTIONS, defaults=QUICK_RUN_DEFAULTS if quick else RUN_DEFAULTS)
    own = QUICK if quick else dict(updates=UPDATES, repeats=2, repeats_shared=1, worker_counts="1,2,3,4")
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (the same code paths on the CPU: the engine's "
                                                       "workers on 'cpu-replica', the graphed loop without capture)")
    p.add_argument("--tasks", default="pos,nmt", help="comma-separated: pos, nmt")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--worker-counts", default=own["worker_counts"], help="engine workers sharing the device, each "
                                                                         "count a run")
    p.add_argument("--updates", type=int, default=own["updates"], help="updates per run, every variant; its middle "
                                                                         "80%% is timed")
    p.add_argument("--repeats", type=int, default=own["repeats"], help="runs of each plain variant and of the engine "
                                                                       "with 1 worker, in rotating order")
    p.add_argument("--repeats-shared", type=int, default=own["repeats_shared"],
                   help="runs of the engine with 2 or more workers sharing the device")
    p.add_argument("--engine-loss", default="padded", choices=("packed", "padded"),
                   help="the engine rows' loss: padded on the bucketed batches (what run.py trains with graphs on; "
                        "a graphed worker step needs it, the compiled variant always uses it), or packed (eager)")
    p.add_argument("--engine-option", action="append", default=[], metavar="FIELD=VALUE",
                   help="a hogwild.Config field for every engine run, repeatable (e.g. update_threads=4)")
    p.add_argument("--json", default=None, help="write every run to this file (rewritten after each run)")
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run: run.py's --preset (small), --vocab-size 500, "
                   "--updates 20, --repeats 1, --worker-counts 1,2 and NMT batches of 4 pairs as defaults")
    return p


def parse(argv: list[str] | None) -> tuple[RunOptions, argparse.Namespace]:
    argv = sys.argv[1:] if argv is None else argv
    p = build_parser(quick="--quick" in argv)
    options, args = parse_run_options(p, argv)
    tasks, variants = args.tasks.split(","), args.variants.split(",")
    try:
        args.counts = sorted({int(n) for n in args.worker_counts.split(",")})
    except ValueError:
        p.error(f"--worker-counts: comma-separated counts, got {args.worker_counts!r}")
    if not set(tasks) <= set(CORPUS):
        p.error(f"--tasks: takes pos, nmt; got {args.tasks!r}")
    if not set(variants) <= set(VARIANTS):
        p.error(f"--variants: takes {', '.join(VARIANTS)}; got {args.variants!r}")
    if args.counts[0] < 1:
        p.error("--worker-counts: counts must be >= 1")
    if args.updates is not None and args.updates < 20:
        p.error("--updates must be >= 20 (the steady window is the middle 80%)")
    if args.repeats < 1 or args.repeats_shared < 1:
        p.error("--repeats and --repeats-shared must be >= 1")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        p.error(f"--device: cuda:N or cpu, got {args.device!r}")
    if options.optimizer is not None and options.optimizer not in PLAIN_OPTIMIZERS:
        p.error(f"--optimizer: the plain loops take {' or '.join(PLAIN_OPTIMIZERS)}, got {options.optimizer!r}")
    try:
        args.overrides = engine_overrides(args.engine_option)
        for task in tasks:  # every engine configuration is checked before anything runs
            for variant in (v for v in variants if v in ENGINE):
                engine_config(task_options(task, options, args), engine_device(args.device), args.counts[-1],
                              variant, args.overrides)
    except (ValueError, hogwild.ConfigError) as error:
        p.error(f"--engine-option: {error}")
    args.tasks, args.variants = tasks, variants
    return options, args


def task_options(task: str, options: RunOptions, args: argparse.Namespace) -> RunOptions:
    """run.py's options for the task and preset (its recipe), with the bench's."""
    batch = options.batch_size or (QUICK_NMT_BATCH if args.quick and task == "nmt" else None)
    return dataclasses.replace(options, task=task, batch_size=batch, progress=False).resolved()


def engine_device(device: str) -> str:
    return "cpu-replica" if device == "cpu" else device


# ---------------------------------------------------------------- main
def schedule(args: argparse.Namespace) -> list[list[tuple[str, int]]]:
    """The runs of each repeat, (variant, workers), rotated by one run every repeat."""
    runs = [(v, k) for v in args.variants for k in (args.counts if v in ENGINE else [1])]
    rounds = []
    for repeat in range(max(args.repeats, args.repeats_shared)):
        due = [(v, k) for v, k in runs if repeat < (args.repeats_shared if k > 1 else args.repeats)]
        shift = repeat % len(due) if due else 0
        if due:
            rounds.append(due[shift:] + due[:shift])
    return rounds


def bench_task(task: str, options: RunOptions, args: argparse.Namespace, nvml: bool,
               saved=None) -> tuple[list[Measurement], list[dict]]:
    """Every run of the task, printed as it ends, then its report: (measurements, runs not measured, each with its
    reason); `saved(measurements, not measured)` after each run."""
    options = task_options(task, options, args)
    count = args.updates
    model, batches = build(task, options, count, corpora_dir(), options.seed)
    print(f"\n{task}: preset {options.preset} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), "
          f"{options.optimizer} lr {options.lr:g}, clip {options.clip_norm}, batch {options.batch_size}, "
          f"{count} updates per run; {batches.lengths}", flush=True)
    device, workers_on = torch_device(engine_device(args.device)), engine_device(args.device)
    torch.set_num_threads(options.threads_per_worker)  # the plain loop gets a worker's threads
    measured, missing, rounds = [], [], schedule(args)
    for repeat, runs in enumerate(rounds):
        for variant, workers in runs:
            label = f"    [{repeat + 1}/{len(rounds)}] {variant} x{workers}:"
            try:
                if variant in ENGINE:
                    config = engine_config(options, workers_on, workers, variant, args.overrides)
                    padded = args.engine_loss == "padded" or config.compile != "off"  # compiled: one shape a bucket
                    m = run_engine(task, variant, model, task_loss(task, padded),
                                   batches.bucketed if padded else batches.exact, config, nvml)
                else:
                    m = run_plain(task, variant, model, batches, device, options, nvml)
            except Exception as error:  # noqa: BLE001 - any failure ends this run, not the bench: said, and go on
                reason = not_measured(error, device)
                print(f"{label} NOT MEASURED: {reason}", flush=True)
                missing.append({"task": task, "variant": variant, "workers": workers, "reason": reason})
            else:
                print(f"{label} {m.rate:.2f} updates/s, {m.tokens_rate:.0f} tokens/s, {m.window} updates timed"
                      f"{run_note(m)}", flush=True)
                measured.append(m)
            if saved:
                saved(measured, missing)
    overlap = device_options(engine_config(options, workers_on, 1), workers_on, options.optimizer)["overlap"]
    if measured:
        report(measured, overlap, args.repeats)
    return measured, missing


def not_measured(error: Exception, device: torch.device) -> str:
    """A failed run's reason (the error's first line), after giving its device memory back; a device that cannot
    even do that is said too, and the next runs will say what they can."""
    text = str(error).strip()
    reason = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
    try:
        release(device)
    except Exception as cleanup:  # noqa: BLE001 - a device left unusable fails the next runs, one by one
        reason += f" (then releasing the device failed: {type(cleanup).__name__}: {str(cleanup).strip()[:200]})"
    return reason


def run_note(m: Measurement) -> str:
    """What a run's line says beside its rate: its graphs and eager steps, and the step an engine ran."""
    notes = []
    if m.graphs is not None and m.prepare_s is not None:
        notes.append(f"{m.graphs} graphs in {m.prepare_s:.1f} s, {m.eager_steps} eager steps")
    elif m.step is not None:
        notes.append(f"{m.step} step, {m.graphs} graphs, {m.eager_steps} eager steps")
    if m.timing == "run clock":
        notes.append("timed by the run clock: too few ticks for a window")
    return f" ({'; '.join(notes)})" if notes else ""


def main(argv: list[str] | None = None) -> list[Measurement]:
    options, args = parse(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"bench_gpu: --device {args.device}, but torch sees no GPU (use --device cpu)")
    command = command_line() if argv is None else shlex.join(["python", "-m", "bench.bench_gpu", *argv])
    device = torch_device(args.device)
    nvml = UtilisationSampler.available(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    use_tf32(options.tf32)  # the plain loops run in this process; the engine's workers get Config.tf32 alike
    print(f"command: {command}")
    print(f"bench_gpu: {args.device} ({name}), torch {torch.__version__}, GPU % from "
          f"{'NVML' if nvml else 'CUDA-event spans' if device.type == 'cuda' else 'step spans (CPU)'}; TF32 matrix "
          f"products {'on' if options.tf32 else 'off'} on every row (--tf32)", flush=True)
    done, lost = [], []
    for task in args.tasks:
        measured, missing = bench_task(task, options, args, nvml,
                                       lambda m, x: save(args.json, command, name, done + m, lost + x))
        done, lost = done + measured, lost + missing
    save(args.json, command, name, done, lost)
    print(f"\ncommand: {command}")
    return done


if __name__ == "__main__":
    main()
