"""Figure 1 of the Hogwild NLP paper: training loss and held-out accuracy against time for 1..N Hogwild workers with
SGD and the linear learning-rate decay (lr 0.03, -0.0135 per epoch), plus 1 worker with Adam; on the Brown corpus by
default (the paper used TIGER, which cannot be redistributed; give --train/--dev for TIGER or UD CoNLL files).

Writes <out>/pos_figure1.png (loss and accuracy vs time and vs updates), pos_figure1.md and pos_figure1.csv.
Defaults fit a 2-core CPU machine (3 runs of 5 minutes each, 16 minutes in all on 2026-11-22); for a GPU box:
    python -m scripts.reproduce_pos --gpus 4 --preset paper --epochs 2 --time-limit 0 --dev-limit 0

Usage: python -m scripts.reproduce_pos [--workers 2] [--time-limit 300] [--out docs/results]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from hogwild.data.corpora import corpora_dir
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves

if __package__:  # python -m scripts.reproduce_pos (the documented form)
    from .series import run_series, script_argv, script_entry, write_runs_json, write_table
else:  # python scripts/reproduce_pos.py with the project installed: this folder is sys.path[0]
    from series import run_series, script_argv, script_entry, write_runs_json, write_table


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--train", nargs="+", default=[str(corpora_dir() / "brown")], help="tagged corpus")
    p.add_argument("--dev", default=None, help="held-out corpus (default: a seeded 10%% split of --train)")
    p.add_argument("--format", default="auto", help="corpus format (auto, conllu, conll, slash)")
    p.add_argument("--tag", default=None, help="upos, xpos or xpos+feats (TIGER-style fine tags)")
    p.add_argument("--workers", type=int, default=2, help="Hogwild CPU worker counts 1..N")
    p.add_argument("--gpus", type=int, default=0, help="Hogwild GPU counts 1..N instead of CPU workers")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="tagger sizes")
    p.add_argument("--time-limit", type=float, default=300.0, help="seconds per run (0: no limit)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per run (the paper: 2)")
    p.add_argument("--batch-size", type=int, default=1, help="sentences per update (the paper: 1)")
    p.add_argument("--dev-limit", type=int, default=500, help="held-out sentences evaluated (0: all)")
    p.add_argument("--eval-every-seconds", type=float, default=30.0, help="evaluation period")
    p.add_argument("--adam-lr", type=float, default=0.001, help="Adam's learning rate (torch default)")
    p.add_argument("--no-adam", action="store_true", help="skip the 1-worker Adam run")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--out", default="docs/results", help="where the figure and tables go")
    p.add_argument("--runs-dir", default="runs/reproduce_pos", help="where the run directories go")
    p.add_argument("--reuse", action="store_true", help="read finished runs (summary.json) instead of training")
    args = p.parse_args(argv)
    for name in ("workers", "epochs", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    common = dict(task="pos", train=args.train, dev=args.dev, format=args.format, tag=args.tag,
                  preset=args.preset, batch_size=args.batch_size, epochs=args.epochs,
                  time_limit=args.time_limit or None, dev_limit=args.dev_limit or None,
                  eval_every_seconds=args.eval_every_seconds, seed=args.seed)
    counts = range(1, (args.gpus or args.workers) + 1)
    device = "GPU" if args.gpus else "worker"
    runs = [(f"SGD, {n} {device}{'s' if n > 1 else ''}", f"sgd-{n}",
             RunOptions(**common, optimizer="sgd", lr=0.03, lr_decay=0.0135,
                        **({"gpus": n} if args.gpus else {"workers": n}),
                        mode="hogwild" if n > 1 else "single")) for n in counts]
    if not args.no_adam:
        runs.append((f"Adam, 1 {device}", "adam-1", RunOptions(**common, optimizer="adam", lr=args.adam_lr,
                                                               lr_decay=0.0, mode="single",
                                                               **({"gpus": 1} if args.gpus else {"workers": 1}))))
    results = run_series(runs, args.runs_dir, command, args.reuse)
    out = Path(args.out)
    plot_curves([r.curves for r in results], out / "pos_figure1.png",
                title=f"POS tagging ({Path(args.train[0]).name}): Hogwild SGD vs Adam", minutes=True)
    rows = [{"run": r.label, "workers": r.summary["workers"], "optimizer": r.summary["optimizer"],
             "updates": r.summary["updates"], "minutes": round(r.minutes, 2),
             "updates/s": r.summary["updates_per_second"], "final train loss": r.summary["final_train_loss"],
             "best held-out accuracy": r.heldout(), "staleness": r.summary["staleness_mean"]} for r in results]
    columns = ["run", "workers", "optimizer", "updates", "minutes", "updates/s", "final train loss",
               "best held-out accuracy", "staleness"]
    text = write_table(rows, columns, out / "pos_figure1.md", out / "pos_figure1.csv",
                       title="POS tagging: Figure 1 of the Hogwild paper at CPU scale",
                       notes=[f"Held-out accuracy on the first {args.dev_limit or 'all'} held-out sentences; "
                              f"figure: pos_figure1.png. Run directories: {args.runs_dir}."],
                       argv=command)
    write_runs_json(results, out / "pos_figure1.runs.json")
    print(text)
    return 0


if __name__ == "__main__":
    script_entry(main, __file__)
