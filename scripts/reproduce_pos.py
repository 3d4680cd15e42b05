"""Figure 1 of the Hogwild NLP paper: training loss and held-out accuracy against time for 1..N Hogwild workers with
SGD and the linear learning-rate decay (lr 0.03, -0.0135 per epoch), plus 1 worker with Adam; on the Brown corpus by
default (the paper used TIGER, which cannot be redistributed; give --train/--dev for TIGER or UD CoNLL files).

Writes <results-dir>/pos_figure1.png (loss and accuracy vs time and vs updates), pos_figure1.md and pos_figure1.csv
(one row per run), and with several --seeds the mean +- std per configuration; every table ends with whether and when
each Hogwild SGD configuration overtakes Adam (the first evaluation from which its accuracy, averaged over seeds,
stays at or above Adam's), against wall time and against updates. Finished runs are kept: `--reuse` trains only
what is missing, `--only-report` nothing. Defaults fit a 2-core CPU machine (3 runs of 5 minutes each, 16 minutes in
all on 2026-11-22); issue #13's setting (2 epochs of Brown, the default recipe, 2 seeds):
    python -m scripts.reproduce_pos --recipe default --epochs 2 --time-limit 0 --seeds 0,1 --reuse
and for a GPU box: --gpus 4 --preset paper --epochs 2 --time-limit 0 --dev-limit 0

Usage: python -m scripts.reproduce_pos [--workers 2] [--time-limit 300] [--runs-dir runs/reproduce_pos]
The results go beside the runs (--results-dir defaults to --runs-dir); docs/results/README.md has the commands that
wrote the committed ones there.
Every run takes run.py's options (`--help` lists them, with this script's own defaults beside run.py's).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from hogwild.data.corpora import corpora_dir
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves
from hogwild.tasks.run_flags import HelpFormatter, add_run_options

if __package__:  # python -m scripts.reproduce_pos (the documented form)
    from .series import (add_series_flags, finished, parse_series_args, run_series, script_argv, script_entry,
                         seed_summary, series_note, write_runs_json, write_table)
else:  # python scripts/reproduce_pos.py with the project installed: this folder is sys.path[0]
    from series import (add_series_flags, finished, parse_series_args, run_series, script_argv, script_entry,
                        seed_summary, series_note, write_runs_json, write_table)


# Figure 1 at CPU scale: this script's defaults of run.py's options (--help shows run.py's beside them)
FIGURE1 = {"train": [str(corpora_dir() / "brown")], "recipe": "paper", "epochs": 2, "time_limit": 300.0,
           "dev_limit": 500, "eval_every_seconds": 30.0, "checkpoint_every": 2000}
SET_PER_RUN = ("optimizer", "mode", "out", "resume", "progress")  # the series decides these for each run


def build_parser() -> argparse.ArgumentParser:
    note = series_note(("task", *SET_PER_RUN), "--workers N (or --gpus N): the SGD runs use 1..N; --lr and --lr-decay: "
                       "SGD's (default: the recipe's rule; paper: 0.03, -0.0135 per epoch, words seen 10 times; "
                       "default: 0.1, decay per 40k updates, words seen twice); --eval-every N replaces the "
                       "evaluation period in seconds.")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + "\n\n" + note, formatter_class=HelpFormatter)
    add_run_options(p, leave_out=SET_PER_RUN, fixed={"task": "pos"}, defaults=FIGURE1)
    own = p.add_argument_group("the series (this script's own)")
    own.add_argument("--adam-lr", type=float, default=0.001, help="Adam's learning rate (torch default)")
    own.add_argument("--no-adam", action="store_true", help="skip the 1-worker Adam run")
    add_series_flags(own, "reproduce_pos", seeds="comma-separated seeds (default: --seed); each run once per seed",
                     reuse="read finished runs back and resume stopped ones from their last.pt",
                     only_report="train nothing: the tables from the runs finished so far")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return parse_series_args(build_parser(), argv)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, str, str, RunOptions]]:
    """(configuration, label, run directory name, options): SGD with 1..N workers and Adam with 1, once per seed."""
    base = args.options
    if base.eval_every:  # evaluations every N updates instead of every --eval-every-seconds
        base = dataclasses.replace(base, eval_every_seconds=None)
    device = "GPU" if base.gpus else "worker"
    configurations = [(f"SGD, {n} {device}{'s' if n > 1 else ''}", f"sgd-{n}",
                       dict(optimizer="sgd", **({"gpus": n} if base.gpus else {"workers": n}),
                            mode="hogwild" if n > 1 else "single")) for n in range(1, (base.gpus or base.workers) + 1)]
    if not args.no_adam:
        configurations.append((f"Adam, 1 {device}", "adam-1",
                               dict(optimizer="adam", lr=args.adam_lr, lr_decay=0.0, mode="single",
                                    **({"gpus": 1} if base.gpus else {"workers": 1}))))
    several = len(args.seed_list) > 1
    # one seed 0 keeps the directory names of earlier runs (sgd-1, adam-1); any other seed is in the name, so that
    # --reuse never reads another seed's run
    named = several or args.seed_list != [0]
    return [(config, f"{config}, seed {seed}" if several else config, f"{name}-seed{seed}" if named else name,
             dataclasses.replace(base, **extra, seed=seed))
            for seed in args.seed_list for config, name, extra in configurations]  # seed-major: a series
            # stopped part-way has every configuration of its first seeds


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    plan = planned_runs(args)
    results = run_series([(label, name, options) for _, label, name, options in plan], args.runs_dir, command,
                         args.reuse, report_only=args.only_report)
    plan, results = finished(plan, results)  # --only-report: the runs that have finished so far
    out = Path(args.results_dir)
    plot_curves([r.curves for r in results], out / "pos_figure1.png",
                title=f"POS tagging ({Path(args.options.train[0]).name}): Hogwild SGD vs Adam", minutes=True)
    rows = [{"run": r.label, "workers": r.summary["workers"], "optimizer": r.summary["optimizer"],
             "updates": r.summary["updates"], "minutes": round(r.minutes, 2),
             "updates/s": r.summary["updates_per_second"], "final train loss": r.summary["final_train_loss"],
             "best held-out accuracy": r.heldout(), "staleness": r.summary["staleness_mean"]} for r in results]
    columns = ["run", "workers", "optimizer", "updates", "minutes", "updates/s", "final train loss",
               "best held-out accuracy", "staleness"]
    by_config = {}
    for (config, *_), result in zip(plan, results):
        by_config.setdefault(config, []).append(result)
    notes = [f"Held-out accuracy on the first {args.options.dev_limit or 'all'} held-out sentences; "
             f"figure: pos_figure1.png. Run directories: {args.runs_dir}.", *overtaking(by_config)]
    text = write_table(rows, columns, out / "pos_figure1.md", out / "pos_figure1.csv",
                       title="POS tagging: Figure 1 of the Hogwild paper at CPU scale", notes=notes, argv=command)
    if len(args.seed_list) > 1:
        summary_rows = seed_summary([config for config, *_ in plan], rows, columns[3:])
        text += "\n" + write_table(summary_rows, ["configuration", "runs", *columns[3:]], out / "pos_figure1_seeds.md",
                                   title="POS tagging: mean +- std over seeds per configuration", notes=notes,
                                   argv=command)
    write_runs_json(results, out / "pos_figure1.runs.json")
    print(text)
    return 0


def mean_curve(runs, axis: str) -> list[tuple[float, float]]:
    """(x, accuracy averaged over the runs) at every evaluation of any run; each run's accuracy at x is its last
    evaluation at or before x (none before its first, nothing past its last)."""
    curves = [list(zip(getattr(r.curves, axis), r.curves.values)) for r in runs]
    end = min(curve[-1][0] for curve in curves if curve) if all(curves) else 0
    points = []
    for x in sorted({x for curve in curves for x, _ in curve if x <= end}):
        values = [next((v for cx, v in reversed(curve) if cx <= x), None) for curve in curves]
        if None not in values:
            points.append((x, statistics.mean(values)))
    return points


def first_lasting_lead(sgd: list[tuple[float, float]], adam: list[tuple[float, float]]) -> float | None:
    """The first x from which SGD's accuracy is >= Adam's at every later common point (None: never, or no overlap)."""
    end = min(sgd[-1][0], adam[-1][0]) if sgd and adam else None
    if end is None:
        return None
    grid = sorted({x for x, _ in sgd + adam if x <= end})

    def at(curve, x):
        return next((v for cx, v in reversed(curve) if cx <= x), None)

    ahead = [(x, at(sgd, x) is not None and at(adam, x) is not None and at(sgd, x) >= at(adam, x)) for x in grid]
    since = None
    for x, lead in ahead:
        since = (since if since is not None else x) if lead else None
    return since


def overtaking(by_config: dict) -> list[str]:
    """Whether and when each SGD configuration overtakes Adam, by wall time and by updates (means over seeds)."""
    adam = next((runs for config, runs in by_config.items() if config.startswith("Adam")), None)
    if not adam:
        return []
    lines = []
    for config, runs in by_config.items():
        if config.startswith("Adam"):
            continue
        found = []
        for axis, unit, scale in (("eval_seconds", "minutes", 60.0), ("eval_updates", "updates", 1.0)):
            x = first_lasting_lead(mean_curve(runs, axis), mean_curve(adam, axis))
            found.append(f"from {x / scale:.4g} {unit} on" if x is not None else f"not within the runs ({unit})")
        lines.append(f"{config} against Adam (held-out accuracy, mean over seeds): at or above it "
                     f"{found[0]}; by updates, {found[1]}.")
    return lines


if __name__ == "__main__":
    script_entry(main, __file__)
