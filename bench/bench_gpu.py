"""GPU benchmark: the strongest plain single-GPU PyTorch loop against the engine's workers sharing that GPU.

Usage (one GPU):   python bench/bench_gpu.py --device cuda:0 --tasks nmt --updates 200 --repeats 3
Without a GPU:     python bench/bench_gpu.py --device cpu --quick      (seconds; the same code path on the CPU)

Both sides train the same model from the same initial weights on the same batches with run.py's recipe for the
preset (tasks.options.RunOptions: --preset paper is the paper's recipe: POS SGD 0.03 with sparse embedding
gradients and one sentence per update, NMT SGD 0.1 with the gradient norm clipped at 1.0 and 64 pairs per update;
--optimizer adam swaps the optimizer on both sides). Batches hold random ids with corpus-like lengths: each
sentence's length (NMT: the pair's two lengths) is drawn from the real corpus under $HOGWILD_CORPORA (Brown; the
first 5,000 Europarl fr-en pairs, Moses-tokenized, at most 50 words like run.py), else from a gamma distribution
with the corpus's mean and spread; NMT batches are bucketed like run.py's batcher (pools of 100 batches sorted by
length, then shuffled). Vocabulary sizes: about Brown's (bench_models.POS_VOCAB) and --vocab-size per NMT side.

Variants (--variants), run --repeats times each, the order rotating by one variant every repeat:
  plain               model and optimizer on the device, the batch copied in each step; torch's fused optimizer on a
                      GPU for the dense parameters (sparse embedding tables: SGD, or SparseAdam for Adam)
  plain-tf32          the same with TF32 matrix products (torch.backends.cuda.matmul.allow_tf32)
  plain-compile       the same with torch.compile of the step's hot function (NMT: the decoder step, run once per
                      target word; POS: the tagger's forward, which dynamo splits around the cuDNN LSTMs)
  plain-tf32-compile  both
  engine              hogwild.train with K workers sharing the device, K from --workers (Config(devices=[dev] * K)),
                      run.py's engine options (on a GPU: page-locked shared parameters, the update on the CPU
                      overlapped with the next step, the fused CPU optimizer kernel)
  engine-tf32         the same with TF32 matrix products in the workers (Config.tf32)
  engine-compiled     the same with the workers' step compiled (Config.compile='reduce-overhead': CUDA graphs on a
                      GPU, inductor's kernels alone on the CPU), NMT batches padded to run.py's length buckets
                      (more decoder steps than the other variants train: the price of shapes that repeat); its
                      phase means include the compilations, its updates/s (the steady window) does not
The plain variants apply every step; the engine skips non-finite ones. Printed per variant: updates/s (median and
range over the repeats), its ratio to the best plain variant, non-finite steps (plain: loss or clipped gradient norm
not finite, counted on the device; engine: skipped updates), the GPU's utilisation in the steady window
(torch.cuda.utilization(), i.e. NVML, when pynvml is installed; else 'span': the share of wall time covered by the
steps' CUDA-event spans, summed over the workers, which counts launch gaps inside a step as busy), and for the engine
its phases in ms per update (CUDA events on a GPU): pull (host->device), compute (forward + backward), push
(gradients device->host), update (the CPU optimizer step). Throughput counts the steady middle 80% of the updates
(each batch's forward stamps the time), so start-up, spawning and compilation are excluded alike.

Then a projection to 1..4 GPUs with one worker each: a worker's cycle is pull + max(compute + push, update) when the
update overlaps the next step (pull + compute + push + update without), with the device phases of 1 worker alone and
the update measured with N workers sharing the host (the largest N run when N was not), printed as hours per 90k
updates beside the paper's Table 1 (26.89 / 16.56 / 9.24 / 6.96 h on 1 / 2 / 3 / 4 GPUs). --json writes every
measurement. The command that produced the output is printed first and last.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hogwild  # noqa: E402
from bench_models import POS_VOCAB  # noqa: E402
from corpus_batches import CORPUS, bucketed, corpus_lengths, fallback_lengths, make_batch  # noqa: E402
from gpu_timing import StampedLoss, StepSpans, UtilisationSampler, sampler_for, steady_window, tf32_matmuls  # noqa: E402
from hogwild.data.batching import pad_lengths  # noqa: E402
from hogwild.data.corpora import corpora_dir  # noqa: E402
from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset  # noqa: E402
from hogwild.tasks.defaults import COMPILED_LENGTH_BUCKET, RECIPES, TASK_DEFAULTS  # noqa: E402  (run.py's values)
from hogwild.tasks.options import RunOptions  # noqa: E402
from hogwild.worker.replica import move_batch, sparse_tables, torch_device  # noqa: E402
from hogwild.worker.worker import device_options  # noqa: E402

PAPER_HOURS = {1: 26.89, 2: 16.56, 3: 9.24, 4: 6.96}  # Table 1: hours per 90k updates on 1..4 GPUs
UPDATES_90K = 90_000
VARIANTS = {"plain": (False, False), "plain-tf32": (True, False), "plain-compile": (False, True),
            "plain-tf32-compile": (True, True), "engine": (False, False), "engine-tf32": (True, False),
            "engine-compiled": (False, True)}  # (tf32, compile)
ENGINE_COMPILE = "reduce-overhead"  # the engine-compiled variant's Config.compile
QUICK = dict(preset="small", updates=20, repeats=1, workers="1,2", vocab_size=500)  # --quick's defaults
QUICK_NMT_BATCH = 4
HOT_FUNCTION = {"nmt": "step", "pos": "forward"}  # the method plain-compile compiles


class IncompleteRun(RuntimeError):
    """An engine run that did not train every batch: it is reported, not timed."""


@dataclasses.dataclass
class Measurement:
    """One run of one variant."""

    task: str
    variant: str
    workers: int
    rate: float  # updates/s over the steady middle 80%
    nonfinite: int | None  # plain: steps whose loss/gradient norm was not finite; engine: skipped updates
    gpu: float | None  # utilisation in percent (see gpu_source)
    gpu_source: str  # 'nvml' | 'span'
    phase_ms: dict[str, float] | None = None  # engine: mean ms per update per worker


def build(task: str, options: RunOptions, count: int, corpora: Path, seed: int):
    """(model on the CPU, loss_fn, batches each with an 'index', a line describing the lengths)."""
    rng, g = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    try:
        found = corpus_lengths(task, corpora)
        why = f"{CORPUS[task]} not at {corpora}"
    except ImportError as error:  # the corpus is there, its reader's module (sacremoses) is not
        found, why = None, f"{CORPUS[task]} unreadable: {error}"
    lengths, source = found or (fallback_lengths(task, 100_000, rng), f"a gamma fit ({why})")
    plan = bucketed(lengths, options.batch_size, count, rng)
    batches = [make_batch(task, lens, options.vocab_size, g) for lens in plan]
    for index, batch in enumerate(batches):
        batch["index"] = index  # a Python int: moving the batch to a device leaves it on the host
    torch.manual_seed(seed)
    if task == "pos":  # as the job builders (tasks.pos_task: sparse embedding gradients; tasks.nmt_task) build them
        loss_fn = pos_loss
        model = POSTagger(pos_preset(options.preset, **POS_VOCAB, dropout=options.dropout, sparse_embeddings=True))
    else:
        loss_fn = nmt_loss
        model = AttentionNMT(nmt_preset(options.preset, src_words=options.vocab_size, tgt_words=options.vocab_size,
                                        dropout=options.dropout))
    flat = np.concatenate(plan)
    means = " / ".join(f"{m:.1f}" for m in np.atleast_1d(flat.mean(0)))
    return model, loss_fn, batches, f"lengths from {source}, mean {means} words"


# ---------------------------------------------------------------- the two sides
def plain_optimizers(model: nn.Module, optimizer: str, lr: float, device: torch.device) -> list[torch.optim.Optimizer]:
    """What a user writes: the fused kernel on a GPU for the dense parameters; the sparse embedding tables (sparse
    gradients, which fused kernels refuse) with plain SGD, or SparseAdam (lazy moments, as the engine's Adam)."""
    params = list(model.parameters())
    tables = set(sparse_tables(model))
    dense = [p for i, p in enumerate(params) if i not in tables]
    sparse = [p for i, p in enumerate(params) if i in tables]
    fused = {"fused": True} if device.type == "cuda" else {}
    if optimizer == "sgd":
        out = [torch.optim.SGD(dense, lr=lr, **fused)]
        return out + ([torch.optim.SGD(sparse, lr=lr)] if sparse else [])
    out = [torch.optim.Adam(dense, lr=lr, **fused)]
    return out + ([torch.optim.SparseAdam(sparse, lr=lr)] if sparse else [])


def plain_steps(model: nn.Module, loss_fn, batches: list, device: torch.device, optimizers: list,
                clip_norm: float | None, spans: StepSpans | None = None) -> torch.Tensor:
    """The plain training loop over `batches` on `device`; returns the count of steps whose loss (with clipping: the
    gradient norm) was not finite, a 0-d tensor on the device (counted there: no sync per step)."""
    nonfinite = torch.zeros((), dtype=torch.int64, device=device)
    for batch in batches:
        if spans is not None:
            spans.start()
        on_device = move_batch(batch, device, non_blocking=True)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss, _ = loss_fn(model, on_device)
        loss.backward()
        if clip_norm is not None:
            nonfinite += ~torch.isfinite(torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm))
        else:
            nonfinite += ~torch.isfinite(loss.detach())
        for optimizer in optimizers:
            optimizer.step()
        if spans is not None:
            spans.end()
    return nonfinite


def run_plain(task: str, variant: str, model: nn.Module, loss_fn, batches: list, device: torch.device,
              options: RunOptions, nvml: bool) -> Measurement:
    """The plain loop on one device, in this process, on a copy of `model`."""
    tf32, compiled = VARIANTS[variant]
    model = copy.deepcopy(model).to(device)
    if compiled:
        setattr(model, HOT_FUNCTION[task], torch.compile(getattr(model, HOT_FUNCTION[task])))
    optimizers = plain_optimizers(model, options.optimizer, options.lr, device)
    stamps = torch.zeros(len(batches), dtype=torch.float64)
    spans = StepSpans(device)
    with tf32_matmuls(tf32), sampler_for(device, nvml) as sampler:
        nonfinite = plain_steps(model, StampedLoss(loss_fn, stamps), batches, device, optimizers, options.clip_norm,
                                spans)
        seconds = spans.seconds()  # waits for the device
    rate, t0, t1 = steady_window(stamps)
    steady = seconds[len(seconds) // 10:max(9 * len(seconds) // 10, 1)]
    gpu = sampler.mean(t0, t1) if nvml else min(100 * rate * statistics.fmean(steady), 100.0)  # one step at a time
    del model, optimizers
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return Measurement(task, variant, 1, rate, int(nonfinite), gpu, "nvml" if nvml else "span")


def engine_config(options: RunOptions, device: str, workers: int) -> hogwild.Config:
    """run.py's engine configuration for `workers` workers on `device`, one epoch of the batches, nothing written."""
    config = options.engine_config([device] * workers, "accuracy")
    return dataclasses.replace(config, epochs=1, max_steps=None, time_limit=None, eval_every=None,
                               eval_every_seconds=None, checkpoint_dir=None, progress=False, tensorboard=False,
                               log_every=10 ** 9)


def run_engine(task: str, variant: str, model: nn.Module, loss_fn, batches: list, device: str, workers: int,
               options: RunOptions, nvml: bool) -> Measurement:
    """hogwild.train with `workers` workers sharing `device`."""
    stamps = torch.zeros(len(batches), dtype=torch.float64).share_memory_()
    tf32, compiled = VARIANTS[variant]
    config = dataclasses.replace(engine_config(options, device, workers), tf32=tf32,
                                 compile=ENGINE_COMPILE if compiled else "off")
    if compiled and task == "nmt":  # shapes that repeat: one compilation per bucket, as run.py --compile pads
        batches = [pad_lengths(batch, COMPILED_LENGTH_BUCKET) for batch in batches]
    with sampler_for(torch_device(device), nvml) as sampler:
        result = hogwild.train(copy.deepcopy(model), StampedLoss(loss_fn, stamps), batches, config)
    if result.updates != len(batches):  # one epoch, nothing asked to stop it
        raise IncompleteRun(f"the run ended after {result.updates} of {len(batches)} updates (stop reason "
                            f"{result.stop_reason!r}, per worker {result.worker_updates}, {result.wall_seconds:.1f} s)")
    rate, t0, t1 = steady_window(stamps)
    ms = result.phase_ms
    gpu = sampler.mean(t0, t1) if nvml else rate * (ms["pull"] + ms["compute"] + ms["push"]) / 10
    return Measurement(task, variant, workers, rate, result.skipped_updates, gpu, "nvml" if nvml else "span",
                       dict(ms))


# ---------------------------------------------------------------- report
def projection(engine: dict[int, dict[str, float]], overlap: bool) -> list[tuple[int, float, float]]:
    """(GPUs, cycle ms, hours per 90k updates) for 1..4 GPUs with one worker each; engine: workers -> phase ms."""
    alone = engine[min(engine)]
    rows = []
    for gpus in range(1, 5):
        update = engine.get(gpus, engine[max(engine)])["update"]  # the host's update with `gpus` workers on it
        work = alone["compute"] + alone["push"]
        cycle = alone["pull"] + (max(work, update) if overlap else work + update)
        rows.append((gpus, cycle, UPDATES_90K * cycle / gpus / 3.6e6))
    return rows


def summarise(runs: list[Measurement]) -> dict[tuple[str, int], dict]:
    """(variant, workers) -> median/min/max updates/s, non-finite steps in all, mean GPU %, mean phase ms."""
    keys = dict.fromkeys((m.variant, m.workers) for m in runs)
    out = {}
    for key in keys:
        same = [m for m in runs if (m.variant, m.workers) == key]
        rates = [m.rate for m in same]
        gpus = [m.gpu for m in same if m.gpu is not None]
        phases = [m.phase_ms for m in same if m.phase_ms]
        out[key] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
                    "nonfinite": sum(m.nonfinite or 0 for m in same), "gpu": statistics.fmean(gpus) if gpus else None,
                    "source": same[0].gpu_source,
                    "phase_ms": {k: statistics.fmean(p[k] for p in phases) for k in phases[0]} if phases else None}
    return out


def report(runs: list[Measurement], overlap: bool, repeats: int) -> None:
    """The task's table, its ratios and the projection to 1..4 GPUs beside the paper's Table 1."""
    rows = summarise(runs)
    plain = {k: v for k, v in rows.items() if k[0].startswith("plain")}
    best = max(plain, key=lambda k: plain[k]["median"]) if plain else None
    base = plain[best]["median"] if best else None
    print(f"  variant             K  updates/s (median, min-max of {repeats})  x best plain  non-finite  GPU %  "
          f"  pull compute   push update (ms/update, per worker)")
    for (variant, workers), row in rows.items():
        ratio = f"{row['median'] / base:11.3f}" if base else f"{'-':>11}"
        gpu = f"{row['gpu']:5.1f} {row['source']:4}" if row["gpu"] is not None else f"{'-':>10}"
        ms = row["phase_ms"]
        phases = (f"{ms['pull']:6.2f} {ms['compute']:7.2f} {ms['push']:6.2f} {ms['update']:6.2f}" if ms else "")
        print(f"  {variant:18} {workers}  {row['median']:9.2f} ({row['min']:8.2f} - {row['max']:8.2f})"
              f"      {ratio}  {row['nonfinite']:10d}  {gpu}  {phases}")
    engine = {k[1]: v for k, v in rows.items() if k[0] == "engine"}
    if best and engine:
        top = max(engine, key=lambda k: engine[k]["median"])
        first = min(engine)
        print(f"  best plain: {best[0]}; engine {first} worker(s) / best plain = {engine[first]['median'] / base:.3f}"
              f"; best engine ({top} worker(s)) / best plain = {engine[top]['median'] / base:.3f}")
    if engine:
        print(f"  projection, one worker per GPU ({'overlapped' if overlap else 'serial'} update; cycle = pull + "
              f"{'max(compute + push, update)' if overlap else 'compute + push + update'}):")
        print("  GPUs  cycle ms  updates/s  hours per 90k  paper Table 1 (h)")
        for gpus, cycle, hours in projection({n: v["phase_ms"] for n, v in engine.items()}, overlap):
            note = "" if gpus in engine else f"   (update measured with {max(engine)} workers)"
            print(f"  {gpus}    {cycle:9.2f} {gpus * 1000 / cycle:10.2f} {hours:14.2f} {PAPER_HOURS[gpus]:14.2f}{note}")


# ---------------------------------------------------------------- main
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (the same code path on the CPU: the engine's "
                                                       "workers on 'cpu-replica')")
    p.add_argument("--tasks", default="pos,nmt", help="comma-separated: pos, nmt")
    p.add_argument("--variants", default="plain,plain-tf32,plain-compile,engine",
                   help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--workers", default="1,2,3,4", help="engine workers sharing the device, each count a variant")
    p.add_argument("--preset", default="paper", choices=("paper", "small"), help="model size")
    p.add_argument("--recipe", default="paper", choices=RECIPES, help="run.py's recipe (optimizer, lr, clipping)")
    p.add_argument("--optimizer", default=None, choices=("sgd", "adam"), help="default: the recipe's (sgd)")
    p.add_argument("--lr", type=float, default=None, help="default: the recipe's for the optimizer")
    p.add_argument("--batch-size", type=int, default=None, help="default: run.py's (POS 1 sentence, NMT 64 pairs)")
    p.add_argument("--vocab-size", type=int, default=15_000, help="NMT words per side")
    p.add_argument("--updates", type=int, default=200, help="updates per run (every variant)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each variant, in rotating order")
    p.add_argument("--threads-per-worker", type=int, default=None, help="default: run.py's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write every measurement to this file")
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run: sets the defaults of --preset small, "
                                                        "--updates 20, --repeats 1, --workers 1,2, --vocab-size 500 "
                                                        "and NMT batches of 4 pairs")
    argv = sys.argv[1:] if argv is None else argv
    if "--quick" in argv:
        p.set_defaults(**QUICK)
    args = p.parse_args(argv)
    tasks, variants = args.tasks.split(","), args.variants.split(",")
    try:
        args.counts = sorted({int(n) for n in args.workers.split(",")})
    except ValueError:
        p.error(f"--workers: comma-separated counts, got {args.workers!r}")
    if not set(tasks) <= set(CORPUS):
        p.error(f"--tasks: takes pos, nmt; got {args.tasks!r}")
    if not set(variants) <= set(VARIANTS):
        p.error(f"--variants: takes {', '.join(VARIANTS)}; got {args.variants!r}")
    if args.counts[0] < 1:
        p.error("--workers: counts must be >= 1")
    if args.updates < 20:
        p.error("--updates must be >= 20 (the steady window is the middle 80%)")
    for name in ("repeats", "batch_size", "vocab_size", "threads_per_worker"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        p.error(f"--device: cuda:N or cpu, got {args.device!r}")
    args.tasks, args.variants = tasks, variants
    return args


def run_options(task: str, args: argparse.Namespace) -> RunOptions:
    """run.py's options for the task and preset (its recipe), with the bench's overrides."""
    quick_nmt = args.quick and task == "nmt"
    values = dict(task=task, preset=args.preset, recipe=args.recipe, optimizer=args.optimizer, lr=args.lr,
                  batch_size=args.batch_size or (QUICK_NMT_BATCH if quick_nmt else TASK_DEFAULTS[task]["batch_size"]),
                  vocab_size=args.vocab_size, seed=args.seed, progress=False)
    if args.threads_per_worker:
        values["threads_per_worker"] = args.threads_per_worker
    return RunOptions(**values).resolved()


def bench_task(task: str, args: argparse.Namespace, nvml: bool) -> list[Measurement]:
    options = run_options(task, args)
    model, loss_fn, batches, lengths = build(task, options, args.updates, corpora_dir(), args.seed)
    print(f"\n{task}: preset {options.preset} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), "
          f"{options.optimizer} lr {options.lr:g}, clip {options.clip_norm}, batch {options.batch_size}, "
          f"{len(batches)} updates per run; {lengths}")
    device = torch_device("cpu" if args.device == "cpu" else args.device)
    engine_device = "cpu-replica" if args.device == "cpu" else args.device
    torch.set_num_threads(options.threads_per_worker)  # the plain loop gets a worker's threads
    runs = [(v, k) for v in args.variants for k in (args.counts if v.startswith("engine") else [1])]
    measured = []
    for repeat in range(args.repeats):
        shift = repeat % len(runs)
        for variant, workers in runs[shift:] + runs[:shift]:
            try:
                if variant.startswith("engine"):
                    m = run_engine(task, variant, model, loss_fn, batches, engine_device, workers, options, nvml)
                else:
                    m = run_plain(task, variant, model, loss_fn, batches, device, options, nvml)
            except IncompleteRun as error:  # said and left out of the table; the other runs still measure
                print(f"    [{repeat + 1}/{args.repeats}] {variant} x{workers}: NOT MEASURED: {error}", flush=True)
                continue
            print(f"    [{repeat + 1}/{args.repeats}] {variant} x{workers}: {m.rate:.2f} updates/s", flush=True)
            measured.append(m)
    overlap = device_options(engine_config(options, engine_device, 1), engine_device, options.optimizer)["overlap"]
    report(measured, overlap, args.repeats)
    return measured


def main(argv: list[str] | None = None) -> list[Measurement]:
    args = parse(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"bench_gpu: --device {args.device}, but torch sees no GPU (use --device cpu)")
    command = shlex.join(["python", "bench/bench_gpu.py"] + (sys.argv[1:] if argv is None else argv))
    device = torch_device(args.device)
    nvml = UtilisationSampler.available(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"command: {command}")
    print(f"bench_gpu: {args.device} ({name}), torch {torch.__version__}, GPU % from "
          f"{'NVML' if nvml else 'CUDA-event spans' if device.type == 'cuda' else 'step spans (CPU)'}")
    measured = [m for task in args.tasks for m in bench_task(task, args, nvml)]
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "device": name,
                                               "runs": [dataclasses.asdict(m) for m in measured]}, indent=1) + "\n")
    print(f"\ncommand: {command}")
    return measured


if __name__ == "__main__":
    main()
