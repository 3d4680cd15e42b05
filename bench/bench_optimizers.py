"""Adam against SGD on the POS tagger, end to end: steady-state updates/s of one engine worker per optimizer setting.

Usage: `python -m bench.bench_optimizers --seconds 60 --rounds 2` (Brown from ../shared/corpora; --quick: synthetic)

Variants (the default recipe's POS job on the same data, hogwild.train with 1 CPU worker unless said, no evaluation):
  sgd          the default recipe: SGD, sparse embedding gradients
  adam-dense   Adam with dense embedding gradients (every row's moments updated at every update: the old job)
  adam         Adam with sparse embedding gradients (lazy rows and moments, as torch.optim.SparseAdam)
  adam-fused   the same with torch's fused CPU Adam kernel for the dense parameters (run.py --fused-step)
  sgd-hogwild2 (on request) sgd with 2 Hogwild workers sharing the parameters and the optimizer
  sgd-replica2 (on request) the same on replicas (run.py --cpu-workers replica: every step pulls a private copy,
               of the embedding tables only the rows of its sentence, as run.py's POS config says)
  sgd-replica2-whole (on request) sgd-replica2 pulling the whole word table every step (Config.sparse_pull off)
  sgd-sync2    (on request) sgd with 2 synchronous workers (an update averages 2 sentences' gradients)
  sgd-copies2  (on request) 2 independent runs of sgd at once (separate processes, each its own model, nothing
               shared), updates/s summed: what this machine gives 2 processes of this job with no sharing at all,
               the ceiling for sgd-hogwild2
They run in rounds, the order rotating each round, and each variant's median is printed with its ratio to sgd.
updates/s is measured between the engine's first and last 'train' records (start-up excluded); the mean optimizer
step ("update") and forward+backward ("compute") milliseconds per update come from the same records.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import statistics
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/bench_optimizers.py` from anywhere

import hogwild  # noqa: E402
from hogwild.data.corpora import corpora_dir  # noqa: E402
from hogwild.tasks.devices import worker_devices  # noqa: E402
from hogwild.tasks.options import RunOptions  # noqa: E402
from hogwild.tasks.pos_task import load_data, pos_job  # noqa: E402


class Variant(NamedTuple):
    optimizer: str
    sparse: bool  # sparse embedding gradients
    fused: bool = False  # torch's fused CPU optimizer step
    workers: int = 1
    mode: str = "single"
    copies: int = 1  # independent runs at once
    cpu_workers: str = "in-place"  # run.py's --cpu-workers: in place on the shared parameters, or on replicas
    whole_pull: bool = False  # replicas pull every row of the embedding tables (else only the batch's: run.py's)


VARIANTS = {
    "sgd": Variant("sgd", True), "adam-dense": Variant("adam", False), "adam": Variant("adam", True),
    "adam-fused": Variant("adam", True, fused=True), "sgd-hogwild2": Variant("sgd", True, workers=2, mode="hogwild"),
    "sgd-replica2": Variant("sgd", True, workers=2, mode="hogwild", cpu_workers="replica"),
    "sgd-replica2-whole": Variant("sgd", True, workers=2, mode="hogwild", cpu_workers="replica", whole_pull=True),
    "sgd-sync2": Variant("sgd", True, workers=2, mode="sync"), "sgd-copies2": Variant("sgd", True, copies=2),
}
DEFAULT_VARIANTS = ("sgd", "adam-dense", "adam", "adam-fused")


def measure(options: RunOptions, dataset, variant: str, seconds: float) -> dict[str, float]:
    """One variant's run: steady-state updates/s and mean phase milliseconds per update."""
    chosen = VARIANTS[variant]
    resolved = dataclasses.replace(options, optimizer=chosen.optimizer, fused_step=chosen.fused,
                                   workers=chosen.workers, mode=chosen.mode).resolved()  # the recipe's lr
    torch.manual_seed(options.seed)
    job = pos_job(resolved, dataset, sparse_embeddings=chosen.sparse)
    devices = worker_devices(0, chosen.workers, chosen.mode, cpu_workers=chosen.cpu_workers)
    config = dataclasses.replace(resolved.engine_config(devices, job.metric), checkpoint_dir=None, time_limit=seconds,
                                 eval_every=None, eval_every_seconds=None, tensorboard=False)
    if chosen.whole_pull:
        config = dataclasses.replace(config, sparse_pull=False)
    result = hogwild.train(job.model, job.loss_fn, job.batches, config)
    records = [r for r in result.records if r["updates"] > 0]
    first, last = records[0], records[-1]
    steady = records[1:]
    phase = {key: statistics.fmean(r["phase_ms"].get(key, float("nan")) for r in steady) for key in ("compute",
                                                                                                   "update")}
    return {"updates_per_s": (last["updates"] - first["updates"]) / (last["time"] - first["time"]),
            "updates": result.updates, **{f"{k}_ms": v for k, v in phase.items()}}


def _copy(options: RunOptions, variant: str, seconds: float, results) -> None:
    """One of several concurrent copies (a process of its own): loads the data (from the cache), trains, reports."""
    try:
        torch.set_num_threads(1)
        results.put(measure(options, load_data(options.resolved()), variant, seconds))
    except BaseException:  # noqa: BLE001
        results.put({"error": traceback.format_exc()})


def measure_copies(options: RunOptions, dataset, variant: str, seconds: float) -> dict[str, float]:
    """The variant's independent copies at once: summed updates/s, mean phase milliseconds per update."""
    copies = VARIANTS[variant].copies
    if copies == 1:
        return measure(options, dataset, variant, seconds)
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_copy, args=(options, variant, seconds, results)) for _ in range(copies)]
    for process in processes:
        process.start()
    runs = [results.get() for _ in processes]
    for process in processes:
        process.join()
    failed = [run["error"] for run in runs if "error" in run]
    if failed:
        raise RuntimeError(f"a copy of {variant} failed:\n{failed[0]}")
    return {"updates_per_s": sum(run["updates_per_s"] for run in runs), "updates": sum(run["updates"] for run in runs),
            **{key: statistics.fmean(run[key] for run in runs) for key in ("compute_ms", "update_ms")}}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--train", default=str(corpora_dir() / "brown"), help="POS corpus")
    parser.add_argument("--seconds", type=float, default=60.0, help="training time of each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated, of {tuple(VARIANTS)}")
    parser.add_argument("--quick", action="store_true", help="synthetic corpus, seconds per run: checks the benchmark")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be >= 1 and --seconds > 0")
    values = dict(task="pos", workers=1, mode="single", progress=False, log_every=100)
    if args.quick:
        values.update(synthetic_size=200, log_every=20)
        args.seconds = min(args.seconds, 5.0)
    else:
        if not Path(args.train).exists():
            raise SystemExit(f"--train: {args.train} not found (set HOGWILD_CORPORA or pass --train)")
        values.update(train=[args.train])
    options = RunOptions(**values)
    dataset = load_data(options.resolved())  # once: every variant trains on the same batches
    torch.set_num_threads(1)
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
        for variant in order:
            runs[variant].append(measure_copies(options, dataset, variant, args.seconds))
            run = runs[variant][-1]
            print(f"round {round_ + 1} {variant:12s} {run['updates_per_s']:7.1f} updates/s  compute "
                  f"{run['compute_ms']:.2f} ms  update {run['update_ms']:.2f} ms", flush=True)
    medians = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in runs.items()}
    base = medians.get("sgd")
    print("\n| variant | updates/s (median) | ratio to sgd | compute ms/update | optimizer step ms/update |")
    print("|---|---:|---:|---:|---:|")
    for variant, m in medians.items():
        ratio = f"{m['updates_per_s'] / base['updates_per_s']:.3f}" if base else "n/a"
        print(f"| {variant} | {m['updates_per_s']:.1f} | {ratio} | {m['compute_ms']:.2f} | {m['update_ms']:.2f} |")
    print("command:", shlex.join([Path(sys.executable).name] + sys.argv))
    return medians


if __name__ == "__main__":
    main()
