"""Time to accuracy: how soon each way of training on one box reaches a held-out target, not how many updates/s.

Usage:
    python -m bench.bench_convergence --task pos --target 0.95 --minutes 12,single=22  # Brown, 1,024 dev sentences
    python -m bench.bench_convergence --task nmt --minutes 12,single=20 --dev-limit 500 --eval-seconds 60
    python -m bench.bench_convergence --quick                                          # synthetic, seconds (CI)

Variants (same model, data, recipe and evaluation; the recipe is run.py's defaults for the task, or --recipe paper):
  single    hogwild.train with 1 worker (mode 'single')
  hogwild2  hogwild.train with 2 lock-free workers, as run.py runs them (--cpu-workers' default for the task: NMT
            on replicas, POS in place)
  inplace2  (on request) 2 lock-free workers training in place on the shared parameters (--cpu-workers in-place):
            the other worker's updates land in the middle of a step's forward and backward
  replica2  (on request) 2 lock-free workers, each on a private CPU replica that pulls the shared parameters before
            every step (--cpu-workers replica, the GPU workers' path): one consistent version per step
  sync2     hogwild.train with 2 synchronous workers (averaged gradients every step)
  torch2    the pytorch/examples mnist_hogwild pattern (bench_engine.mnist_hogwild_train): model.share_memory() and
            2 torch.multiprocessing Processes, each with its own torch.optim optimizer and its own 1/2 share of the
            batches (reshuffled every epoch)
The parent takes a snapshot of the parameters every --eval-seconds (or --eval-updates) while training goes on; a
variant's time to target is the wall time, from the moment it is started, of the first snapshot that scores >= the
target. Also reported: the updates that snapshot had seen, so that runs on a loaded machine still compare
convergence per update. How snapshots are scored (--scoring):
  offline   (default) kept in memory and scored after the run, so scoring takes no core from training: with 2
            workers on 2 cores an online check of 1,024 Brown sentences took a third of the machine, and more from
            2 workers than from 1. Every variant trains for its --minutes; then every --coarse-th snapshot is scored
            in order until one reaches the target, then the ones before it back to the last coarse one below it
            (the first to reach it wins); when none reaches it, the last snapshot too. "best" is the best scored.
  online    scored in the parent as they are taken, and the run stops at the target (Config.target for the engine
            runs): a user's run with evaluation, and the fast --quick check.
--target auto (the default for NMT) takes the target from the 1-worker run: what its last snapshot scores, after its
--minutes, rounded down (0.1 BLEU, 0.1% accuracy); single then runs first, and the others race to the score the serial
run reaches in that time.
--metric perplexity (or loss; NMT) makes the target a held-out perplexity, reached from above (auto rounds up to
0.1): greedy BLEU early in a run moves by a point between neighbouring snapshots, held-out perplexity falls smoothly,
and every scored snapshot still records BLEU (and the rest) under 'heldout'.
--levels 0.94,0.945,0.948 adds a table of minutes (and updates) to each of those levels and the time ratios to
single at each: a target on the flat top of a curve moves its crossing by many updates for little accuracy, and lower
levels say whether a ratio is the runs' or that noise's. Offline it scores every snapshot (as --coarse 1) up to the
hardest level; online runs stop there.
Prints a table with the ratio of each variant's time to single's, the issue's targets (hogwild2 <= 0.55 x single
and <= 0.8 x sync2) and the command; --json writes every scored snapshot of every run, with the
evaluation's other numbers (NMT: held-out loss and perplexity) under 'heldout'.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import textwrap
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from hogwild.data.corpora import corpora_dir
from hogwild.tasks.devices import worker_devices
from hogwild.tasks.job_builders import build_job
from hogwild.tasks.task_job import TaskJob
from hogwild.tasks.options import OptionError, RunOptions, declared, flag
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options

import hogwild
from bench import command_line
from bench.bench_engine import mnist_hogwild_train
from bench.curves import (
    LOWER_IS_BETTER,
    Curve,
    describe_point,
    reaches,
    report,
    report_levels,
    scores,
    snapshot,
    stop_at,
)

VARIANTS = ("single", "hogwild2", "sync2", "torch2", "inplace2", "replica2")
DEFAULT_VARIANTS = VARIANTS[:4]  # the four; the others on request
METRICS = {"pos": ("accuracy",), "nmt": ("bleu", "perplexity", "loss")}  # the first: the task's default
ROUNDING = {"bleu": 0.1, "accuracy": 0.001, "perplexity": 0.1, "loss": 0.01}  # --target auto's step


# run.py's options every variant takes (the rest are the variant's, or the benchmark's own flags below)
SET_PER_VARIANT = ("gpus", "workers", "workers_per_gpu", "mode", "cpu_workers", "time_limit", "eval_every",
                   "eval_every_seconds", "eval_budget", "patience", "checkpoint_every", "log_every", "out", "resume",
                   "progress", "test", "distributed", "servers", "period", "n_push", "n_fetch", "alpha", "tester",
                   "shard_data")
BENCH_DEFAULTS = {"dev_limit": 1024, "synthetic_size": 300}  # this benchmark's defaults of run.py's options


def job_options(args: argparse.Namespace, variant: str) -> RunOptions:
    """run.py's options for this benchmark (the task's default recipe unless --recipe), the variant's workers and
    mode, its --minutes."""
    workers, mode = {"single": (1, "single"), "hogwild2": (2, "hogwild"), "sync2": (2, "sync"),
                     "torch2": (2, "hogwild"), "inplace2": (2, "hogwild"), "replica2": (2, "hogwild")}[variant]
    cpu_workers = {"inplace2": "in-place", "torch2": "in-place", "replica2": "replica"}.get(variant)
    return dataclasses.replace(args.options, workers=workers, mode=mode, cpu_workers=cpu_workers, progress=False,
                               time_limit=args.minutes[variant] * 60, log_every=10 ** 6).resolved()


def run_engine(job: TaskJob, options: RunOptions, args: argparse.Namespace, variant: str) -> Curve:
    curve, start, offline = Curve(variant, args.metric), [0.0], args.scoring == "offline"

    def evaluate(model: torch.nn.Module) -> dict[str, float]:  # runs in the parent on a fresh snapshot
        seconds = time.perf_counter() - start[0]
        if offline:
            curve.points.append({"seconds": round(seconds, 2), "state": snapshot(model)})
            return {"snapshots": float(len(curve.points))}
        point = {"seconds": round(seconds, 2), **scores(job, model, args.metric)}
        curve.points.append(point)
        return {job.metric: point["metric"], **point.get("heldout", {})}

    # No run directory: no checkpoint writes in the parent (the torch2 variant has none either)
    devices = worker_devices(0, options.workers, options.mode, cpu_workers=options.cpu_workers)
    config = dataclasses.replace(options.engine_config(devices, job.metric), checkpoint_dir=None,
                                 eval_every=args.eval_updates,
                                 eval_every_seconds=None if args.eval_updates else args.eval_seconds,
                                 best_metric="snapshots" if offline else job.metric,
                                 target=None if offline else stop_at(args), tensorboard=False,
                                 eval_budget=None)  # every scheduled check runs
    start[0] = time.perf_counter()
    result = hogwild.train(job.model, job.loss_fn, job.batches, config, evaluate)
    for point, record in zip(curve.points, result.history):  # the engine's history holds each evaluation's updates
        point["updates"] = record["updates"]
    curve.stop_reason = result.stop_reason
    return curve


def torch_process(rank: int, model: torch.nn.Module, options: RunOptions, counts: torch.Tensor,
                  stop: torch.Tensor) -> None:
    """One torch2 process: the mnist_hogwild loop with the recipe's optimizer, schedule and clipping, on its shard
    of the batches until `stop`. Like the example's processes, each loads its data itself (the parent's seeded
    batches, from the on-disk cache): passing Brown's 51k small batch tensors to a process takes a file descriptor
    (or a memory map) each, past the system's limits."""
    torch.set_num_threads(1)
    job = build_job(options)
    loss_fn, shard, metric = job.loss_fn, job.batches[rank::options.workers], job.metric
    del job  # its model is not the shared one
    torch.manual_seed(options.seed + rank)
    config = options.engine_config(["cpu"] * options.workers, metric)
    schedule = config.schedule()
    sparse = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse]
    dense = [p for p in model.parameters() if all(p is not q for q in sparse)]
    if config.optimizer == "adam":  # torch.optim.Adam refuses sparse gradients: SparseAdam (lazy) takes those rows
        optimizers = [torch.optim.Adam(dense, lr=config.lr, **config.optimizer_args)] + (
            [torch.optim.SparseAdam(sparse, lr=config.lr)] if sparse else [])
    else:
        optimizers = [torch.optim.SGD(model.parameters(), lr=config.lr, **config.optimizer_args)]

    def batches():  # reshuffled every epoch; the rate set from the global step (own count x P) before each step
        for epoch in range(10 ** 9):
            order = torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch * 100 + rank))
            for index in order.tolist():
                if stop[0]:
                    return
                for group in (g for optimizer in optimizers for g in optimizer.param_groups):
                    group["lr"] = schedule(int(counts[rank]) * options.workers, epoch)
                yield shard[index]
                counts[rank] += 1

    mnist_hogwild_train(model, batches(), loss_fn, optimizers, config.clip_norm)


def run_torch(job: TaskJob, options: RunOptions, args: argparse.Namespace, variant: str) -> Curve:
    """The torch2 variant: its processes train while the parent takes snapshots, as run_engine's evaluate does."""
    if options.optimizer not in ("sgd", "adam"):
        raise SystemExit(f"--variants torch2 supports the sgd and adam recipes, not {options.optimizer!r}")
    curve, model = Curve(variant, args.metric), job.model.share_memory()
    private = copy.deepcopy(model)
    counts = torch.zeros(options.workers, dtype=torch.long).share_memory_()  # (P,) updates per process
    stop = torch.zeros(1, dtype=torch.long).share_memory_()
    context = mp.get_context("spawn")
    start = time.perf_counter()
    workers = [context.Process(target=torch_process, args=(rank, model, options, counts, stop))
               for rank in range(options.workers)]
    for worker in workers:
        worker.start()
    next_eval, next_updates, goal = start + args.eval_seconds, args.eval_updates, stop_at(args)
    try:
        while not curve.stop_reason:
            time.sleep(0.05)
            now, updates = time.perf_counter(), int(counts.sum())
            if any(w.exitcode not in (None, 0) for w in workers):
                raise RuntimeError(f"a torch2 worker failed: exit codes {[w.exitcode for w in workers]}")
            out_of_time = now - start >= args.minutes[variant] * 60
            if not (out_of_time or (updates >= next_updates if next_updates else now >= next_eval)):
                continue
            point = {"seconds": round(now - start, 2), "updates": updates}
            if args.scoring == "offline":
                point["state"] = snapshot(model)
            else:
                private.load_state_dict(model.state_dict())
                point.update(scores(job, private.eval(), args.metric))
            curve.points.append(point)
            if "metric" in point and reaches(point["metric"], goal, args.metric):
                curve.stop_reason = "target"
            elif out_of_time:
                curve.stop_reason = "time_limit"
            next_eval = time.perf_counter() + args.eval_seconds
            next_updates = updates + args.eval_updates if args.eval_updates else None
    finally:
        stop[0] = 1
        for worker in workers:
            worker.join()
    return curve


def auto_target(job: TaskJob, curve: Curve) -> float:
    """--target auto: the score of the curve's last (offline) snapshot, rounded to the easier side (0.1 BLEU, 0.1%
    accuracy, 0.1 perplexity, 0.01 loss): down when higher is better, up when lower is."""
    model = copy.deepcopy(job.model)
    model.load_state_dict(curve.points[-1]["state"])
    curve.points[-1].update(scores(job, model.eval(), curve.metric))  # scored once: score_offline keeps it
    return rounded_target(curve.points[-1]["metric"], curve.metric)


def rounded_target(score: float, metric: str) -> float:
    step = ROUNDING[metric]
    steps = math.ceil(score / step - 1e-9) if metric in LOWER_IS_BETTER else math.floor(score / step + 1e-9)
    return round(steps * step, 4)


def score_offline(job: TaskJob, curve: Curve, target: float, coarse: int) -> None:
    """Score the curve's snapshots after training (see the module docstring): every `coarse`-th one in order until
    one reaches `target`, then the ones after the last coarse snapshot below it, and the last one. Scored points
    keep their metric; unscored ones are dropped."""
    model = copy.deepcopy(job.model)
    points = curve.points

    def score(index: int) -> float:
        if "metric" not in points[index]:
            model.load_state_dict(points[index]["state"])
            points[index].update(scores(job, model.eval(), curve.metric))
        return points[index]["metric"]

    below = -1  # the last coarse snapshot scored below the target
    for index in list(range(0, len(points), coarse)) + [len(points) - 1]:
        if reaches(score(index), target, curve.metric):
            for earlier in range(below + 1, index):
                if reaches(score(earlier), target, curve.metric):
                    break
            break
        below = index
    curve.points = [{k: v for k, v in p.items() if k != "state"} for p in points if "metric" in p]


def run_variant(args: argparse.Namespace, variant: str) -> Curve:
    """Train the variant on a fresh, identically initialised model; score its snapshots (offline scoring)."""
    torch.set_num_threads(1)
    options = job_options(args, variant)
    torch.manual_seed(args.options.seed)
    job = build_job(options)
    curve = (run_torch if variant == "torch2" else run_engine)(job, options, args, variant)
    if args.scoring == "offline":
        started = time.perf_counter()
        torch.set_num_threads(args.scoring_threads)  # training is over: scoring may use the whole machine
        if args.target == "auto":  # only single gets here with it: main runs single first
            args.target = auto_target(job, curve)
            print(f"target: {args.target} ({args.metric}), what 1 worker reaches in {args.minutes[variant]:g} "
                  "minutes (--target auto)", flush=True)
        score_offline(job, curve, stop_at(args), args.coarse)
        torch.set_num_threads(1)
        print(f"{variant:9s} scored {len(curve.points)} snapshots in {time.perf_counter() - started:.0f} s",
              flush=True)
    print_reached(args, curve)
    return curve


def print_reached(args: argparse.Namespace, curve: Curve) -> None:
    reached = curve.first_reaching(args.target)
    print(f"{curve.variant:9s} {'target at ' + describe_point(reached) if reached else 'target not reached'}; "
          f"{len(curve.points)} evaluations, best {curve.best():.4f} "
          f"({curve.stop_reason})", flush=True)


def write_json(args: argparse.Namespace, runs: dict, levels: dict | None = None) -> None:
    data = {"task": args.options.task, "metric": args.metric, "target": args.target, "runs": runs}
    if levels is not None:
        data["levels"] = levels
    args.json.write_text(json.dumps(data, indent=1) + "\n")


def unscored_runs(curves: dict[str, Curve]) -> dict:
    """--json's runs before the report: each run's stop reason and evaluations (a benchmark cut short keeps them)."""
    return {variant: {"stop_reason": curve.stop_reason, "evaluations": curve.points}
            for variant, curve in curves.items()}


def parse_minutes(parser: argparse.ArgumentParser, text: str, variants: list[str]) -> dict[str, float]:
    """--minutes '12' or '12,single=22' -> {variant: minutes} for every variant (a parser error names a bad part)."""
    default, given = None, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.rpartition("=")
        try:
            minutes = float(value)
        except ValueError:
            parser.error(f"--minutes: {part!r} is not MINUTES or VARIANT=MINUTES")
        if minutes <= 0:
            parser.error(f"--minutes: {part!r} must be positive")
        if not name:
            default = minutes
        elif name not in VARIANTS:
            parser.error(f"--minutes: unknown variant {name!r} in {part!r}; choose from {', '.join(VARIANTS)}")
        else:
            given[name] = minutes
    missing = [v for v in variants if v not in given and default is None]
    if missing:
        parser.error(f"--minutes: no time for {', '.join(missing)} (add a plain MINUTES for the rest)")
    return {variant: given.get(variant, default) for variant in variants}


def _levels(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _target(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'auto'") from None


def bench_options(options: RunOptions, quick: bool) -> RunOptions:
    """The options every variant starts from: --quick's synthetic POS task (held-out: 100 sentences), else the
    corpora given, or by default Brown (pos) or Europarl fr-en train and dev (nmt)."""
    if quick:
        return dataclasses.replace(options, task="pos", train=None, dev=None, dev_limit=100)
    corpora = corpora_dir()
    train = corpora / ("brown" if options.task == "pos" else "europarl-fr-en/train")
    dev = str(corpora / "europarl-fr-en" / "dev") if options.task == "nmt" else None
    return dataclasses.replace(options, train=options.train or [str(train)], dev=options.dev or dev)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] + "\n\n" + textwrap.fill(
        "Every variant takes run.py's options below (--config FILE reads them as run.py does; no --train: Brown, or "
        "Europarl fr-en for --task nmt), but " + ", ".join(declared()[name].negative_flag or flag(name)
                                                            for name in SET_PER_VARIANT)
        + ", which the variants and the flags of the benchmark set.", width=116), formatter_class=HelpFormatter)
    add_run_options(parser, leave_out=SET_PER_VARIANT, defaults=BENCH_DEFAULTS)
    own = parser.add_argument_group("the benchmark (its own)")
    own.add_argument("--metric", choices=sorted({m for ms in METRICS.values() for m in ms}), default=None,
                     help="the held-out measure of the target (default: the task's, POS accuracy, NMT greedy "
                          "BLEU); NMT also perplexity or loss (lower is better; the others are still recorded)")
    own.add_argument("--target", type=_target, help="held-out target, or 'auto': what 1 worker reaches in its "
                     "--minutes (default POS accuracy 0.95, NMT auto)")
    own.add_argument("--minutes", default="12", help="training time of each variant (offline scoring) or the "
                     "time after which it gives up (online): MINUTES, or VARIANT=MINUTES pairs, comma-separated, "
                     "with an optional plain MINUTES for the rest (e.g. 12,single=22)")
    own.add_argument("--eval-seconds", type=float, default=30.0, help="seconds between snapshots")
    own.add_argument("--eval-updates", type=int, default=None, help="a snapshot every N updates instead")
    own.add_argument("--scoring", choices=("offline", "online"), default=None,
                     help="offline: score the snapshots after each run (default); online: while it trains, "
                          "stopping at the target (default with --quick)")
    own.add_argument("--coarse", type=int, default=4, help="offline: score every N-th snapshot first")
    own.add_argument("--levels", type=_levels, default=None, help="also report the minutes to each of these "
                     "held-out levels (comma-separated) and their ratios to single; scores every snapshot")
    own.add_argument("--scoring-threads", type=int, default=2, help="offline: torch threads for scoring")
    own.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    own.add_argument("--json", type=Path, help="write every evaluation of every run here")
    own.add_argument("--quick", action="store_true", help="synthetic POS task (--synthetic-size sentences), a low "
                     "target, seconds per run: checks the benchmark itself (CI), measures nothing")
    return parser


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = build_parser()
    options, args = parse_run_options(parser, argv)
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    args.minutes = parse_minutes(parser, args.minutes, variants)
    if args.coarse < 1:
        parser.error(f"--coarse must be >= 1, got {args.coarse}")
    if args.levels is not None:
        if not args.levels:
            parser.error("--levels: give at least one level")
        args.coarse = 1  # every snapshot scored: the first to reach each level is known exactly
    args.scoring = args.scoring or ("online" if args.quick else "offline")
    task = "pos" if args.quick else options.task
    args.metric = args.metric or METRICS[task][0]
    if args.metric not in METRICS[task]:
        parser.error(f"--metric {args.metric}: --task {task} measures {', '.join(METRICS[task])}")
    if args.scoring == "online" and args.metric != METRICS[task][0]:
        parser.error(f"--metric {args.metric} needs --scoring offline (online runs stop at the task's own metric)")
    try:
        args.options = bench_options(options, args.quick)
    except OptionError as error:  # a corpus the defaults name is missing
        parser.error(str(error))
    if args.quick:
        args.minutes = {variant: min(minutes, 1.0) for variant, minutes in args.minutes.items()}
        args.target = 0.3 if args.target is None else args.target
        args.eval_updates = args.eval_updates or 25
    else:
        args.target = args.target if args.target is not None else {"pos": 0.95, "nmt": "auto"}[options.task]
    if args.target == "auto":
        if "single" not in variants:
            parser.error("--target auto takes the target from the single variant: add it to --variants")
        if args.scoring == "online":
            parser.error("--target auto needs --scoring offline (the target is known only after single's run)")
        variants = ["single"] + [v for v in variants if v != "single"]
    torch.set_num_threads(1)
    curves = {}
    for variant in variants:
        curves[variant] = run_variant(args, variant)
        if args.json:  # after every variant: a stopped benchmark keeps the runs it finished
            write_json(args, unscored_runs(curves))
    rows = report(curves, args.target)
    levels = report_levels(curves, args.levels) if args.levels else None
    if args.json:
        write_json(args, rows, levels)
    print("command:", command_line())
    return rows


if __name__ == "__main__":
    main()
