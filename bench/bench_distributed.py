"""Multi-host algorithms vs single-host Hogwild at an equal total number of workers, on one machine.

Usage: flock /tmp/hogwild-heavy.lock nice -n 10 .venv/bin/python -m bench.bench_distributed [--rounds 2]
       python -m bench.bench_distributed --quick   (single and allreduce, 1 round of 400 updates: seconds, CI)

Variants (total training workers = --workers, default 2):
  single      one host, `workers` Hogwild workers (hogwild.train)
  allreduce   `workers` hosts x 1 worker (mpiexec -n workers), averaging every --period local updates
  adpsgd      `workers` hosts x 1 worker on an AD-PSGD ring
  easgd       1 parameter server + `workers` hosts x 1 worker, elastic exchange every --period updates
  eamsgd      as easgd, local optimizer Nesterov momentum
  downpour    1 parameter server + `workers` hosts x 1 worker, push/fetch every --period updates
Each variant trains the same seeded MLP regression task (a fixed random teacher) for the same total number of
updates. Reported per variant (median over interleaved rounds): total updates/s (all hosts' updates divided by the
time from host 0's first training step to its final evaluation, i.e. without worker start-up), the loss of the
final model, and the time from the first training step to the first evaluation of host 0's model at or below
--target (evaluated every --eval-every total updates); the ratios are against `single` in the same round.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from bench import command_line

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("single", "allreduce", "adpsgd", "easgd", "eamsgd", "downpour")


def make_task(features: int, hidden: int, n_batches: int, batch_size: int):
    """A 2-hidden-layer MLP and batches (x (B, F), y (B, 1)) from a fixed random teacher."""
    generator = torch.Generator().manual_seed(1234)
    teacher = torch.randn(features, 1, generator=generator) / features ** 0.5
    x = torch.randn(n_batches * batch_size, features, generator=generator)
    y = torch.tanh(x @ teacher * 2.0)
    batches = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                          nn.Linear(hidden, 1))
    return model, batches


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch  # (B, F), (B, 1)
    return nn.functional.mse_loss(model(x), y)


class FirstStepClock:
    """loss_fn wrapper that records, in shared memory, the wall clock of the first training step of this host."""

    def __init__(self) -> None:
        self.clock = torch.zeros(1, dtype=torch.float64).share_memory_()  # (1,)

    def __call__(self, model, batch):
        if self.clock[0] == 0:
            self.clock[0] = time.time()
        return loss_fn(model, batch)


def run_variant(args) -> None:
    """One training run (inside mpiexec for the distributed variants); host 0 writes args.result_file as JSON."""
    import hogwild
    torch.set_num_threads(1)
    model, batches = make_task(args.features, args.hidden, args.batches, args.batch_size)
    held_out = batches[: max(1, args.batches // 8)]
    clocks: list[tuple[float, float]] = []

    def evaluate(m: nn.Module) -> dict:
        with torch.no_grad():
            loss = float(sum(loss_fn(m, b) for b in held_out) / len(held_out))
        clocks.append((time.time(), loss))
        return {"loss": loss}

    distributed = args.variant != "single"
    hosts = args.workers if distributed else 1
    config = hogwild.Config(workers=1 if distributed else args.workers, optimizer="nesterov" if args.variant ==
                            "eamsgd" else "sgd", lr=args.lr, max_steps=args.updates // hosts,
                            eval_every=max(1, args.eval_every // hosts),
                            best_metric="loss", best_mode="min", progress=False, tensorboard=False, log_every=10**6,
                            seed=0)
    first = FirstStepClock()
    if distributed:
        from hogwild.multihost import train_distributed
        from hogwild.multihost.dist_config import DistConfig
        dist = DistConfig(algorithm=args.variant, servers=1, period=args.period, n_push=args.period,
                          n_fetch=args.period, alpha=args.alpha)
        out = train_distributed(model, first, batches, config, dist, evaluate)
        if out.role != "worker" or out.local is None or out.rank != dist.roles(args.workers + dist.n_servers).index(
                "worker"):
            return
        local, exchanges = out.local, out.exchanges
        updates, wall = local.updates * hosts, local.wall_seconds  # hosts train equal shares of the updates
    else:
        local = hogwild.train(model, first, batches, config, evaluate)
        updates, wall, exchanges = local.updates, local.wall_seconds, 0
    start = float(first.clock[0])
    reached = next((clock for clock, loss in clocks if loss <= args.target), None)
    seconds = clocks[-1][0] - start  # first training step -> final evaluation (worker start-up excluded)
    result = {"variant": args.variant, "updates": updates, "wall_seconds": wall,
              "updates_per_second": updates / seconds,
              "final_loss": clocks[-1][1] if clocks else None, "exchanges": exchanges,
              "time_to_target": None if reached is None else reached - start}
    Path(args.result_file).write_text(json.dumps(result))


def launch(args, variant: str, out: str) -> dict:
    from hogwild.tasks.options import flag

    common = ["--variant", variant, "--result-file", out] + [f"{flag(k)}={v}" for k, v in vars(args).items()
                                                              if k in PASSED]
    command = [sys.executable, str(Path(__file__).resolve()), *common]
    if variant != "single":
        ranks = args.workers + (1 if variant in ("easgd", "eamsgd", "downpour") else 0)
        command = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks), *command]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed:\n{done.stdout}")
    return json.loads(Path(out).read_text())


# run.py's options the runs take (--workers: the total over all hosts; --eval-every: total updates, a host
# evaluating every N / hosts of its own), with this benchmark's defaults; passed on to every variant's process
RUN_OPTIONS = ("workers", "lr", "period", "alpha", "batch_size", "eval_every")
BENCH_DEFAULTS = {"lr": 0.05, "period": 8, "batch_size": 16, "eval_every": 100}
# the benchmark's own settings, passed on too: (flag, type, default, help)
SETTINGS = (
    ("--updates", int, 4000, "total updates per run"),
    ("--features", int, 64, "input size"),
    ("--hidden", int, 256, "hidden size"),
    ("--batches", int, 256, "batches in the data set"),
    ("--target", float, 0.005, "target held-out loss"),
)
PASSED = RUN_OPTIONS + tuple(flag[2:].replace("-", "_") for flag, *_ in SETTINGS)


def build_parser() -> argparse.ArgumentParser:
    # here, not at the top: every spawned training process imports this module, and needs only torch and hogwild
    from hogwild.tasks.options import flag
    from hogwild.tasks.run_flags import HelpFormatter, add_run_options

    parser = argparse.ArgumentParser(description=__doc__ + "\nOf run.py's options it takes " + ", ".join(
        flag(name) for name in RUN_OPTIONS) + " (or --config FILE's).", formatter_class=HelpFormatter)
    add_run_options(parser, only=RUN_OPTIONS, defaults=BENCH_DEFAULTS)
    parser.add_argument("--variants", help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions")
    for option, kind, default, text in SETTINGS:
        parser.add_argument(option, type=kind, default=default, help=text)
    parser.add_argument("--quick", action="store_true", help="--variants single,allreduce (unless given) --rounds 1 "
                        "--updates 400: seconds (CI), measures nothing")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    from hogwild.tasks.run_flags import parse_run_options

    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # the run options' values are checked, then read from args
    if args.variant:
        run_variant(args)
        return
    if args.quick:
        args.variants, args.rounds, args.updates = args.variants or "single,allreduce", 1, 400
    variants = (args.variants or ",".join(VARIANTS)).split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or "single" not in variants:
        parser.error(f"--variants: unknown {unknown} (choose from {VARIANTS}; 'single' is the reference)")
    print("command:", command_line(), flush=True)
    results: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for variant in variants:
                result = launch(args, variant, os.path.join(scratch, f"{variant}-{round_}.json"))
                results[variant].append(result)
                print(f"round {round_} {variant}: {json.dumps(result)}", flush=True)
    base = results["single"]
    print(f"\n{'variant':10s} {'updates/s':>10s} {'ratio':>6s} {'final loss':>10s} {'t->target s':>11s} "
          f"{'ratio':>6s} {'exchanges':>9s}")
    for variant in variants:
        rows = results[variant]
        ups = statistics.median(r["updates_per_second"] for r in rows)
        ups_ratio = statistics.median(r["updates_per_second"] / b["updates_per_second"] for r, b in zip(rows, base))
        loss = statistics.median(r["final_loss"] for r in rows)
        times = [r["time_to_target"] for r in rows]
        pairs = [t / b["time_to_target"] for t, b in zip(times, base) if t is not None and b["time_to_target"]]
        t_text = "never" if None in times else f"{statistics.median(times):11.2f}"
        ratio_text = f"{statistics.median(pairs):6.2f}" if len(pairs) == len(rows) else "   n/a"
        print(f"{variant:10s} {ups:10.0f} {ups_ratio:6.2f} {loss:10.4f} {t_text:>11s} {ratio_text} "
              f"{statistics.median(r['exchanges'] for r in rows):9.0f}")


if __name__ == "__main__":
    main()
