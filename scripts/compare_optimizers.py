"""Optimizers under Hogwild, in the manner of Feng et al. (CIKM 2016): each optimizer with 1 worker and with N
lock-free Hogwild workers, plus synchronous SGD with N workers; peak held-out metric and the training time needed to
reach a target. POS tagging on CoNLL-2000 (WSJ) by default; any run.py task and corpus via the flags.

Writes <out>/compare_optimizers.md, .csv and .png (held-out metric vs time for every run). Defaults fit a 2-core CPU
machine (9 runs of 90 seconds, 15 minutes in all on 2026-11-22); for a GPU box:
    python -m scripts.compare_optimizers --gpus 4 --time-limit 1800 \
        --optimizers sgd msgd nesterov adagrad adadelta rmsprop adam adamax

Usage: python -m scripts.compare_optimizers [--optimizers sgd adam] [--workers 2] [--time-limit 90]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from hogwild.shared_optim import OPTIMIZERS
from hogwild.data.corpora import corpora_dir
from hogwild.tasks.defaults import default_lr
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves

if __package__:  # python -m scripts.compare_optimizers (the documented form)
    from .series import run_series, script_argv, script_entry, write_runs_json, write_table
else:  # python scripts/compare_optimizers.py with the project installed: this folder is sys.path[0]
    from series import run_series, script_argv, script_entry, write_runs_json, write_table


def parse_args(argv=None) -> argparse.Namespace:
    conll = corpora_dir() / "conll2000"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("pos", "nmt"), default="pos", help="which model")
    p.add_argument("--train", nargs="+", default=[str(conll / "train.txt")], help="training corpus (run.py --train)")
    p.add_argument("--dev", default=str(conll / "test.txt"), help="held-out corpus")
    p.add_argument("--optimizers", nargs="+", choices=OPTIMIZERS, default=["sgd", "adagrad", "rmsprop", "adam"],
                   help="optimizers to compare")
    p.add_argument("--lr", nargs="*", default=[], metavar="OPT=LR",
                   help="learning-rate overrides, e.g. sgd=0.05 (default: tasks.defaults.default_lr)")
    p.add_argument("--workers", type=int, default=2, help="N: Hogwild CPU workers of the parallel runs")
    p.add_argument("--gpus", type=int, default=0, help="N GPUs instead of CPU workers")
    p.add_argument("--no-sync", action="store_true", help="skip synchronous SGD")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="model sizes")
    p.add_argument("--batch-size", type=int, default=None, help="run.py --batch-size (default: the task's)")
    p.add_argument("--time-limit", type=float, default=90.0, help="seconds per run")
    p.add_argument("--dev-limit", type=int, default=500, help="held-out sentences evaluated (0: all)")
    p.add_argument("--eval-every-seconds", type=float, default=10.0, help="evaluation period")
    p.add_argument("--target", type=float, default=0.80, help="held-out metric whose first reach is timed")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--out", default="docs/results", help="where the table and figure go")
    p.add_argument("--runs-dir", default="runs/compare_optimizers", help="where the run directories go")
    p.add_argument("--reuse", action="store_true", help="read finished runs (summary.json) instead of training")
    args = p.parse_args(argv)
    try:
        args.lr = {k: float(v) for k, v in (item.split("=", 1) for item in args.lr)}
    except ValueError:
        p.error(f"--lr takes OPT=LR pairs such as sgd=0.05, got {args.lr}")
    unknown = sorted(set(args.lr) - set(OPTIMIZERS))
    if unknown:
        p.error(f"--lr: unknown optimizer(s) {unknown}")
    if args.workers < 2 and not args.gpus:
        p.error("--workers must be >= 2 (the comparison is 1 worker against N)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    n = args.gpus or args.workers
    device = "GPUs" if args.gpus else "workers"
    common = dict(task=args.task, train=args.train, dev=args.dev, preset=args.preset, batch_size=args.batch_size,
                  time_limit=args.time_limit, epochs=100, dev_limit=args.dev_limit or None,
                  eval_every_seconds=args.eval_every_seconds, seed=args.seed, lr_decay=0.0)

    def where(count: int) -> dict:
        return {"gpus": count} if args.gpus else {"workers": count}

    runs = []
    for name in args.optimizers:
        lr = args.lr.get(name, default_lr(args.task, name))
        runs.append((f"{name}, 1 worker", f"{name}-1", RunOptions(**common, optimizer=name, lr=lr, mode="single",
                                                                    **where(1))))
        runs.append((f"{name}, {n} {device} hogwild", f"{name}-{n}-hogwild",
                     RunOptions(**common, optimizer=name, lr=lr, mode="hogwild", **where(n))))
    if not args.no_sync:
        lr = args.lr.get("sgd", default_lr(args.task, "sgd"))
        runs.append((f"sgd, {n} {device} sync", f"sgd-{n}-sync",
                     RunOptions(**common, optimizer="sgd", lr=lr, mode="sync", **where(n))))
    results = run_series(runs, args.runs_dir, command, args.reuse)
    out = Path(args.out)
    plot_curves([r.curves for r in results], out / "compare_optimizers.png",
                title=f"{args.task}: optimizers with 1 worker, {n} Hogwild {device}, and sync SGD")
    metric = results[0].summary["best"]["metric"]
    rows = [{"run": r.label, "optimizer": r.summary["optimizer"], "lr": r.summary["lr"], "mode": r.summary["mode"],
             "workers": r.summary["workers"], "updates": r.summary["updates"],
             "updates/s": r.summary["updates_per_second"], f"peak held-out {metric}": r.heldout(),
             f"seconds to {metric} {args.target}": r.time_to(args.target),
             "final train loss": r.summary["final_train_loss"]} for r in results]
    columns = ["run", "optimizer", "lr", "mode", "workers", "updates", "updates/s", f"peak held-out {metric}",
               f"seconds to {metric} {args.target}", "final train loss"]
    text = write_table(rows, columns, out / "compare_optimizers.md", out / "compare_optimizers.csv",
                       title="Optimizers with 1 worker, N Hogwild workers and synchronous SGD",
                       notes=[f"Each run trains {args.time_limit:g} s (wall clock, including evaluations by the "
                              f"parent); held-out {metric} on the first {args.dev_limit or 'all'} sentences of "
                              f"{Path(args.dev).name}, evaluated every {args.eval_every_seconds:g} s; time to target "
                              f"counts from the start of training ('-': not reached). Figure: compare_optimizers.png."],
                       argv=command)
    write_runs_json(results, out / "compare_optimizers.runs.json")
    print(text)
    return 0


if __name__ == "__main__":
    script_entry(main, __file__)
