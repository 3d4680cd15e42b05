"""Optimizers under Hogwild, in the manner of Feng et al. (CIKM 2016): each optimizer with 1 worker and with N
lock-free Hogwild workers, plus synchronous SGD with N workers; peak held-out metric and the training time needed to
reach a target. POS tagging on CoNLL-2000 (WSJ) by default; any run.py task and corpus via the flags.

Writes <results-dir>/compare_optimizers.md, .csv and .png (held-out metric vs time for every run). Defaults fit a
2-core CPU machine (9 runs of 90 seconds, 15 minutes in all on 2026-11-22); for a GPU box:
    python -m scripts.compare_optimizers --gpus 4 --time-limit 1800 \
        --optimizers sgd msgd nesterov adagrad adadelta rmsprop adam adamax

Usage: python -m scripts.compare_optimizers [--optimizers sgd adam] [--workers 2] [--time-limit 90]
The results go beside the runs (--results-dir defaults to --runs-dir, runs/compare_optimizers); docs/results/README.md
has the commands that wrote the committed ones there.
Every run takes run.py's options (`--help` lists them, with this script's own defaults beside run.py's).
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from hogwild.shared_optim import OPTIMIZERS
from hogwild.data.corpora import corpora_dir
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves
from hogwild.tasks.run_flags import HelpFormatter, add_run_options

if __package__:  # python -m scripts.compare_optimizers (the documented form)
    from .series import (add_series_flags, parse_series_args, run_series, script_argv, script_entry, series_note,
                         write_runs_json, write_table)
else:  # python scripts/compare_optimizers.py with the project installed: this folder is sys.path[0]
    from series import (add_series_flags, parse_series_args, run_series, script_argv, script_entry, series_note,
                        write_runs_json, write_table)


# this script's defaults of run.py's options (--help shows run.py's beside them): POS on CoNLL-2000, 90 s per run
_CONLL = corpora_dir() / "conll2000"
COMPARISON = {"train": [str(_CONLL / "train.txt")], "dev": str(_CONLL / "test.txt"), "time_limit": 90.0,
              "epochs": 100, "dev_limit": 500, "eval_every_seconds": 10.0, "lr_decay": 0.0}
SET_PER_RUN = ("optimizer", "lr", "mode", "out", "resume", "progress")  # the comparison decides these for each run


def build_parser() -> argparse.ArgumentParser:
    note = series_note(SET_PER_RUN, "--workers N (or --gpus N): the parallel runs' workers; each optimizer's "
                       "learning rate is run.py's rule for it unless --lrs gives one.")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + "\n\n" + note, formatter_class=HelpFormatter)
    add_run_options(p, leave_out=SET_PER_RUN, defaults=COMPARISON)
    own = p.add_argument_group("the comparison (this script's own)")
    own.add_argument("--optimizers", nargs="+", choices=OPTIMIZERS, default=["sgd", "adagrad", "rmsprop", "adam"],
                     help="optimizers to compare")
    own.add_argument("--lrs", nargs="*", default=[], metavar="OPT=LR",
                     help="learning rates by optimizer, e.g. sgd=0.05 (default: run.py's rule, tasks.defaults)")
    own.add_argument("--no-sync", action="store_true", help="skip synchronous SGD")
    own.add_argument("--target", type=float, default=0.80, help="held-out metric whose first reach is timed")
    add_series_flags(own, "compare_optimizers", reuse="read finished runs (summary.json) instead of training")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The script's own values, and in `args.options` the run options every run starts from."""
    p = build_parser()
    args = parse_series_args(p, argv)
    options = args.options
    try:
        args.lrs = {name: float(value) for name, value in (item.split("=", 1) for item in args.lrs)}
    except ValueError:
        p.error(f"--lrs takes OPT=LR pairs such as sgd=0.05, got {args.lrs}")
    unknown = sorted(set(args.lrs) - set(OPTIMIZERS))
    if unknown:
        p.error(f"--lrs: unknown optimizer(s) {unknown}")
    if options.workers < 2 and not options.gpus:
        p.error("--workers must be >= 2 (the comparison is 1 worker against N)")
    return args


def planned_runs(args: argparse.Namespace) -> list[tuple[str, str, RunOptions]]:
    """(label, run directory name, options): each optimizer with 1 worker and with N Hogwild workers, then
    synchronous SGD with N."""
    base = args.options
    n = base.gpus or base.workers
    device = "GPUs" if base.gpus else "workers"

    def where(count: int) -> dict:
        return {"gpus": count} if base.gpus else {"workers": count}

    runs = []
    for name in args.optimizers:
        lr = args.lrs.get(name)  # None: run.py's rule for this optimizer
        runs.append((f"{name}, 1 worker", f"{name}-1",
                     dataclasses.replace(base, optimizer=name, lr=lr, mode="single", **where(1))))
        runs.append((f"{name}, {n} {device} hogwild", f"{name}-{n}-hogwild",
                     dataclasses.replace(base, optimizer=name, lr=lr, mode="hogwild", **where(n))))
    if not args.no_sync:
        runs.append((f"sgd, {n} {device} sync", f"sgd-{n}-sync",
                     dataclasses.replace(base, optimizer="sgd", lr=args.lrs.get("sgd"), mode="sync", **where(n))))
    return runs


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    options = args.options
    n = options.gpus or options.workers
    device = "GPUs" if options.gpus else "workers"
    runs = planned_runs(args)
    results = run_series(runs, args.runs_dir, command, args.reuse)
    out = Path(args.results_dir)
    plot_curves([r.curves for r in results], out / "compare_optimizers.png",
                title=f"{options.task}: optimizers with 1 worker, {n} Hogwild {device}, and sync SGD")
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
                       notes=[f"Each run trains {_seconds(options.time_limit)} (wall clock, including evaluations by "
                              f"the parent); held-out {metric} on the first {options.dev_limit or 'all'} sentences of "
                              f"{Path(options.dev).name}, evaluated every {options.eval_every_seconds:g} s; time to "
                              f"target counts from the start of training ('-': not reached). Figure: "
                              f"compare_optimizers.png."],
                       argv=command)
    write_runs_json(results, out / "compare_optimizers.runs.json")
    print(text)
    return 0


def _seconds(limit: float | None) -> str:
    return f"{limit:g} s" if limit else "without a time limit"


if __name__ == "__main__":
    script_entry(main, __file__)
