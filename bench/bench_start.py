"""How long the workers take to start: spawned (each imports torch) against forked from the fork server
(hogwild/worker/start_method.py), for a run.py-like process that trains once and a library script that trains twice.

Usage:
    python -m bench.bench_start [--counts 2 4] [--rounds 3]
    python -m bench.bench_start --quick      (2 workers, 1 round: a smoke test)

Each measurement is a fresh `python` process (HOGWILD_START_METHOD set to the method) that builds the README's
example model and calls `hogwild.train` twice with W 'cpu' workers, --steps updates each (8); the two methods
alternate, round by round. Per row (medians over the rounds):
  first s    the first call's start-up: from the call until every worker is ready (the call's wall time less its
             training time, TrainResult.wall_seconds); forked, this includes starting the fork server
  second s   the same for the second call in the same process (forked: the server is already running)
  process s  the process's whole wall time, interpreter start and imports included
  ratio      forkserver over spawn, per column
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("spawn", "forkserver")

TRAIN_TWICE = r"""
import json, sys, tempfile, time
import torch
from torch import nn
import hogwild


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


if __name__ == "__main__":
    workers, steps = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    x = torch.randn(512, 20)
    y = (x[:, :5].sum(1) > 0).long()
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 512, 32)]
    starts = []
    with tempfile.TemporaryDirectory() as folder:
        for call in range(2):
            model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
            config = hogwild.Config(workers=workers, lr=0.1, max_steps=steps, progress=False, tensorboard=False,
                                    checkpoint_dir=f"{folder}/run{call}")
            began = time.perf_counter()
            result = hogwild.train(model, loss_fn, batches, config)
            starts.append(time.perf_counter() - began - result.wall_seconds)
    print(json.dumps({"first": starts[0], "second": starts[1]}))
"""


def measure(script: Path, method: str, workers: int, steps: int) -> dict:
    """One fresh process training twice (its workers import the script by path, as a spawned worker must)."""
    env = {**os.environ, "HOGWILD_START_METHOD": method, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    began = os.times().elapsed
    done = subprocess.run([sys.executable, str(script), str(workers), str(steps)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"bench_start: the {method} run with {workers} workers failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process": os.times().elapsed - began}


def table(results: dict[tuple[int, str], list[dict]]) -> str:
    lines = [f"{'workers':>7s} {'method':10s} {'first s':>8s} {'second s':>8s} {'process s':>9s}   ratio to spawn"]
    for (workers, method), runs in results.items():
        medians = {key: statistics.median(run[key] for run in runs) for key in ("first", "second", "process")}
        spawned = {key: statistics.median(run[key] for run in results[workers, "spawn"])
                   for key in ("first", "second", "process")}
        ratios = "" if method == "spawn" else " ".join(f"{medians[key] / spawned[key]:.2f}x"
                                                         for key in ("first", "second", "process"))
        lines.append(f"{workers:7d} {method:10s} {medians['first']:8.2f} {medians['second']:8.2f} "
                     f"{medians['process']:9.2f}   {ratios}".rstrip())
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__ + "\nOf run.py's options it takes --steps (updates per call; "
                                     "or --config FILE's).", formatter_class=HelpFormatter)
    add_run_options(parser, only=("steps",), defaults={"steps": 8})
    parser.add_argument("--counts", type=int, nargs="+", default=[2, 4], help="worker counts (default: 2 4)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per method and worker count")
    parser.add_argument("--quick", action="store_true", help="2 workers, 1 round")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # run.py's --steps checked, then read from args
    if args.quick:
        args.counts, args.rounds = [2], 1
    if min(args.counts) < 1 or args.rounds < 1:
        parser.error("--counts and --rounds must be >= 1")
    results: dict[tuple[int, str], list[dict]] = {(w, m): [] for w in args.counts for m in METHODS}
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train_twice.py"
        script.write_text(TRAIN_TWICE)
        for _ in range(args.rounds):
            for workers in args.counts:
                for method in METHODS:
                    results[workers, method].append(measure(script, method, workers, args.steps))
    print(table(results))
    print(f"command: python -m bench.bench_start {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
