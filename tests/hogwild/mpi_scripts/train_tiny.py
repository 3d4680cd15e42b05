"""Train the tiny task with hogwild.multihost.train_distributed (under mpiexec) or single-host hogwild.train.

Usage: mpiexec -n 3 python tests/hogwild/mpi_scripts/train_tiny.py easgd --epochs 4 --out OUT [--servers 1]
       mpiexec -n 3 python tests/hogwild/mpi_scripts/train_tiny.py adpsgd,easgd --epochs 4 --out OUT
       python tests/hogwild/mpi_scripts/train_tiny.py single --epochs 4 --workers 2 --out OUT
       train_tiny.train("single", train_tiny.parse_args([...]))  (in a test's process)
Several algorithms train one after the other in the same job, each from the seeded start. Writes
OUT/<algorithm>-rank<r>.json per algorithm and rank (role, final full-data loss, exchanges, local updates).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hogwild  # noqa: E402
from hogwild.multihost.dist_config import DistConfig  # noqa: E402
from tiny_task import full_loss, loss_fn, make_task  # noqa: E402


def main() -> None:
    args = parse_args()
    if args.tracker_first:
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
    torch.set_num_threads(1)
    for algorithm in args.algorithms.split(","):
        train(algorithm, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("algorithms", help="single | allreduce | adpsgd | easgd | eamsgd | downpour, or several "
                                           "of the multi-host ones, comma-separated")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=32,
                        help="the MLP's width (4096, with --lr 0.0001: a model MPI sends by rendezvous)")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--period", type=int, default=4)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.3)
    parser.add_argument("--tester", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", required=True, help="folder for <algorithm>-rank<r>.json")
    parser.add_argument("--fail-rank", type=int, default=None, help="this rank's worker raises at its 3rd step")
    parser.add_argument("--slow-rank", type=int, default=None, help="only this rank sleeps per step")
    parser.add_argument("--sleep-per-step", type=float, default=0.0, help="slow steps down (fault tests)")
    parser.add_argument("--mark-after", type=int, default=None, help="each rank's worker creates OUT/trained-<rank> "
                                                                     "at its step N (a test then knows it got there)")
    parser.add_argument("--tracker-first", action="store_true",
                        help="start multiprocessing's resource tracker first, as run.py does")
    return parser.parse_args(argv)


def train(algorithm: str, args: argparse.Namespace) -> None:
    """Train the seeded tiny task with `algorithm` and write this rank's OUT/<algorithm>-rank<r>.json."""
    model, batches = make_task(seed=0, hidden=args.hidden)
    optimizer = "nesterov" if algorithm == "eamsgd" else "sgd"
    config = hogwild.Config(workers=args.workers, optimizer=optimizer, lr=args.lr, epochs=args.epochs,
                            max_steps=args.max_steps, seed=0, progress=False, tensorboard=False, log_every=10**6,
                            checkpoint_dir=args.checkpoint_dir, resume=args.resume)
    evaluate = (lambda m: {"loss": full_loss(m, batches)}) if args.tester else None
    slow = args.sleep_per_step and (args.slow_rank is None or int(os.environ.get("PMI_RANK", "0")) == args.slow_rank)
    loss = SlowLoss(args.sleep_per_step, args.out) if slow else loss_fn
    if args.fail_rank is not None and int(os.environ.get("PMI_RANK", "0")) == args.fail_rank:
        loss = FailingLoss()
    if args.mark_after:
        loss = MarkingLoss(loss, args.mark_after, args.out)
    start = time.monotonic()
    if algorithm == "single":
        local = hogwild.train(model, loss, batches, config)
        result = {"rank": 0, "role": "single", "updates": local.updates, "exchanges": 0}
    else:
        from hogwild.multihost import train_distributed
        dist = DistConfig(algorithm=algorithm, period=args.period, n_push=args.period, n_fetch=args.period,
                          servers=args.servers, alpha=args.alpha, tester=args.tester, tester_every_seconds=0.5,
                          heartbeat_seconds=args.heartbeat, timeout_seconds=args.timeout)
        out = train_distributed(model, loss, batches, config, dist, evaluate)
        result = {"rank": out.rank, "role": out.role, "exchanges": out.exchanges,
                  "updates": out.local.updates if out.local else 0, "tests": len(out.tester_history),
                  "final_metrics": out.final_metrics}
    result.update(loss=full_loss(model, batches), seconds=round(time.monotonic() - start, 3))
    with open(os.path.join(args.out, f"{algorithm}-rank{result['rank']}.json"), "w") as file:
        json.dump(result, file)


class FailingLoss:
    """loss_fn whose 10th call raises (a bug in a local worker)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model, batch):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("injected failure at step 3")
        return loss_fn(model, batch)


class MarkingLoss:
    """loss_fn that creates OUT/trained-<rank> at its `steps`-th call (one worker: the rank's step `steps`)."""

    def __init__(self, inner, steps: int, out: str) -> None:
        self.inner, self.steps, self.out, self.calls = inner, steps, out, 0

    def __call__(self, model, batch):
        self.calls += 1
        if self.calls == self.steps:
            open(os.path.join(self.out, f"trained-{os.environ.get('PMI_RANK', '0')}"), "w").close()
        return self.inner(model, batch)


class SlowLoss:
    """loss_fn that sleeps before each step, so that a test can act while training is under way; every worker
    process creates OUT/training-<pid> at its first step."""

    def __init__(self, seconds: float, out: str) -> None:
        self.seconds, self.out, self.started = seconds, out, False

    def __call__(self, model, batch):
        if not self.started:
            self.started = True
            open(os.path.join(self.out, f"training-{os.getpid()}"), "w").close()
        time.sleep(self.seconds)
        return loss_fn(model, batch)


if __name__ == "__main__":
    main()
