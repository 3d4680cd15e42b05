"""Table 1 and Figure 2 of the Hogwild NLP paper: the attention NMT model (Europarl fr->en) trained with 1, 2 (and
3, 4 when the devices exist) Hogwild workers, optionally 2 synchronous workers as the baseline, for the same number
of updates, with one or more seeds each; time, training and held-out loss, held-out BLEU, beam-search BLEU of each
run's best checkpoint on test sets (Europarl test, newstest2014), mean +- std over seeds, and sacreBLEU's paired
bootstrap between the best 1-worker system and the best of the others.

Writes <results-dir>/nmt_table1.md and nmt_table1.csv (one row per run), nmt_table1_seeds.md (mean +- std per
configuration and the significance test), nmt_figure2.png (loss and BLEU vs time and vs updates) and the held-out
loss at equal updates (nmt_heldout_loss.md and .csv per run, nmt_heldout_loss_seeds.md per configuration,
nmt_heldout_loss.png). Finished runs and decoded test sets are kept: `--reuse` trains only what is missing,
`--only-report` trains and decodes nothing.
Defaults fit a 2-core CPU machine (small model, 6,000-word vocabularies, pairs of <= 30 words, 1 and 2 workers,
1,500 updates of 32 pairs each, one seed, BLEU on 200 held-out sentences, no test sets); issue #13's setting:
    python -m scripts.reproduce_nmt --recipe default --vocab-size 15000 --max-len 50 --batch-size 64 --updates 12000 \
        --seeds 0,1,2 --sync --test-sets europarl,newstest2014 --dev-limit 500 --eval-every 2000 --reuse
issue #28's (3,000 updates; the sync baseline on seed 0 only): --updates 3000 --eval-every 250 --sync-seeds 1
and the paper's on a GPU box: --gpus 4 --preset paper --recipe paper --updates 90000 (on a one-GPU machine,
--gpus 1 --workers-per-gpu 2 compares 1 and 2 workers sharing the GPU).

Usage: python -m scripts.reproduce_nmt [--workers 2] [--updates 1500] [--seeds 0] [--runs-dir runs/reproduce_nmt]
The results go beside the runs (--results-dir defaults to --runs-dir); docs/results/README.md has the commands that
wrote the committed ones there.
Every run takes run.py's options (`--help` lists them, with this script's own defaults beside run.py's).
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from hogwild.data.corpora import corpora_dir
from hogwild.tasks.options import RunOptions
from hogwild.tasks.plotting import plot_curves
from hogwild.tasks.rundir import read_curves
from hogwild.tasks.run_flags import HelpFormatter, add_run_options

if __package__:  # python -m scripts.reproduce_nmt (the documented form)
    from .nmt_tests import TestSet, hypothesis_path, paired_bootstrap, score_path, score_test_set
    from .series import (add_series_flags, finished, parse_series_args, run_series, script_argv, script_entry,
                         seed_summary, series_note, value_at, write_runs_json, write_table)
else:  # python scripts/reproduce_nmt.py with the project installed: this folder is sys.path[0]
    from nmt_tests import TestSet, hypothesis_path, paired_bootstrap, score_path, score_test_set
    from series import (add_series_flags, finished, parse_series_args, run_series, script_argv, script_entry,
                        seed_summary, series_note, value_at, write_runs_json, write_table)

PAPER = {1: (26.89, 68.44, 14.42), 2: (16.56, 64.53, 14.46), 3: (9.24, 64.11, 14.32), 4: (6.96, 64.26, 14.40)}


def test_sets(names: str, src: str, tgt: str) -> list[TestSet]:
    """--test-sets: 'europarl' (the staged Europarl test), 'newstest2014' (WMT14 SRC-TGT or TGT-SRC), or PREFIX
    paths (PREFIX.SRC / PREFIX.TGT, named by the file name; two sets may not share a name)."""
    root, found = corpora_dir(), []
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name == "europarl":
            found.append(TestSet(name, str(root / f"europarl-{src}-{tgt}" / "test"), src, tgt))
        elif name == "newstest2014":
            pair = next((p for p in (f"{src}-{tgt}", f"{tgt}-{src}")
                         if (root / "newstest2014" / f"newstest2014.{p}.{src}").exists()), f"{src}-{tgt}")
            found.append(TestSet(name, str(root / "newstest2014" / f"newstest2014.{pair}"), src, tgt))
        else:
            found.append(TestSet(Path(name).name, name, src, tgt))
    named = [test.name for test in found]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        raise SystemExit(f"--test-sets: two test sets are named {', '.join(twice)} (their translations would be "
                         f"kept under one name); give PREFIX paths with different file names")
    return found


# Table 1 at CPU scale: this script's defaults of run.py's options (--help shows run.py's beside them)
_EUROPARL = corpora_dir() / "europarl-fr-en"
TABLE1 = {"train": [str(_EUROPARL / "train")], "dev": str(_EUROPARL / "dev"), "recipe": "paper", "vocab_size": 6000,
          "max_len": 30, "batch_size": 32, "dev_limit": 200, "eval_every": 250, "checkpoint_every": 100}
SET_PER_RUN = ("mode", "steps", "out", "resume", "progress")  # the series decides these for each run


def build_parser() -> argparse.ArgumentParser:
    note = series_note(("task", *SET_PER_RUN), "--workers N (or --gpus N): the runs use 1..N workers (with --gpus 1 "
                       "--workers-per-gpu K: 1..K workers sharing the GPU); --steps: --updates; --beam: also the "
                       "test sets'; --recipe paper: SGD 0.1 constant, default: Adam 1e-3 (clip 1 both).")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + "\n\n" + note, formatter_class=HelpFormatter)
    add_run_options(p, leave_out=SET_PER_RUN, fixed={"task": "nmt"}, defaults=TABLE1)
    own = p.add_argument_group("the series (this script's own)")
    own.add_argument("--updates", type=int, default=1500, help="updates per run, the same for every run")
    own.add_argument("--sync", action="store_true", help="also 2 synchronous workers (the baseline)")
    own.add_argument("--sync-seeds", type=int, default=0,
                     help="with --sync: the baseline runs on the first N seeds only (0: on every seed)")
    own.add_argument("--test-sets", default="", help="comma-separated: europarl, newstest2014 or PREFIX paths; "
                                                     "each run's best checkpoint translates them at the end")
    own.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples (0: no test)")
    add_series_flags(own, "reproduce_nmt",
                     seeds="comma-separated seeds (default: --seed); every configuration runs once per seed",
                     reuse="read finished runs back and resume stopped ones from their last.pt",
                     only_report="train and decode nothing: tables from the runs finished so far")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    p = build_parser()
    args = parse_series_args(p, argv)
    options = args.options
    if args.updates < 1:
        p.error("--updates must be >= 1")
    if options.workers_per_gpu > 1 and options.gpus != 1:
        p.error("--workers-per-gpu K (> 1) is for --gpus 1")
    if args.sync_seeds < 0:
        p.error("--sync-seeds must be >= 0 (0: every seed)")
    if args.sync and max(options.gpus * options.workers_per_gpu, options.gpus or options.workers) < 2:
        p.error("--sync needs 2 workers (--workers 2, --gpus 2 or --gpus 1 --workers-per-gpu 2)")
    return args


def planned_runs(args: argparse.Namespace) -> list[tuple[str, str, str, RunOptions]]:
    """(configuration, label, run directory name, options) for every configuration and seed."""
    base = dataclasses.replace(args.options, steps=args.updates)
    device = "GPU" if base.gpus else "worker"
    if base.gpus == 1 and base.workers_per_gpu > 1:  # k workers sharing the one GPU
        pairs = [(f"{k} worker{'s' if k > 1 else ''} on 1 GPU", f"gpu1-workers-{k}", {"gpus": 1, "workers_per_gpu": k})
                 for k in range(1, base.workers_per_gpu + 1)]
        two = {"gpus": 1, "workers_per_gpu": 2}
    else:
        pairs = [(f"{n} {device}{'s' if n > 1 else ''}", f"workers-{n}", {"gpus": n} if base.gpus else {"workers": n})
                 for n in range(1, (base.gpus or base.workers) + 1)]
        two = {"gpus": 2} if base.gpus else {"workers": 2}
    configurations = [(label, name, dict(mode="hogwild", **devices)) for label, name, devices in pairs]
    if args.sync:
        configurations.append((f"{pairs[1][0]}, sync", "sync-2", dict(mode="sync", **two)))
    sync_seeds = set(args.seed_list[:args.sync_seeds or None])
    # seed-major: a series stopped part-way has every configuration of its first seeds
    return [(config, f"{config}, seed {seed}", f"{name}-seed{seed}", dataclasses.replace(base, **extra, seed=seed))
            for seed in args.seed_list for config, name, extra in configurations
            if extra["mode"] != "sync" or seed in sync_seeds]


def main(argv=None) -> int:
    args = parse_args(argv)
    command = script_argv(__file__, argv)
    tests = test_sets(args.test_sets, args.src_lang, args.tgt_lang)
    plan = planned_runs(args)
    results = run_series([(label, name, options) for _, label, name, options in plan], args.runs_dir, command,
                         args.reuse, report_only=args.only_report)
    plan, results = finished(plan, results)  # --only-report: the runs that have finished so far
    scores: dict[tuple[Path, str], dict] = {}  # (run directory, test set name) -> score_test_set's result
    for number, (result, test) in enumerate(((r, t) for r in results for t in tests), 1):
        if args.only_report and not score_path(result.run_dir, test, args.beam).exists():
            continue
        print(f"== [{number}/{len(results) * len(tests)}] {result.label}: {test.name}, beam {args.beam}", flush=True)
        scores[result.run_dir, test.name] = score_test_set(result.run_dir, test, args.beam,
                                                           "cuda:0" if args.gpus else "cpu")
    out = Path(args.results_dir)
    plot_curves([r.curves for r in results], out / "nmt_figure2.png",
                title=f"NMT {args.src_lang}->{args.tgt_lang}: {args.updates} updates per run", minutes=True)
    rows = [run_row(args, config, options.seed, r, tests, scores)
            for (config, _, _, options), r in zip(plan, results)]
    test_columns = [f"{t.name} BLEU (beam {args.beam})" for t in tests]
    columns = ["run", "workers", "mode", "seed", "updates", "minutes", "updates/s", "hours per 90k", "train loss",
               "held-out loss", "held-out BLEU (greedy, best)", f"held-out BLEU (beam {args.beam})", *test_columns]
    notes = [f"Train loss: mean per-token loss over the last logging interval (the paper reports a per-sentence cost, "
             f"so the scales differ). Held-out: the first {args.dev_limit or 'all'} sentences of "
             f"{Path(args.dev).name}; loss and greedy BLEU at the end of training (greedy best = best periodic "
             f"evaluation), beam = the best checkpoint. Test BLEU: the best checkpoint, beam {args.beam}, sacreBLEU "
             f"on detokenized output against the raw references"
             + (f" ({next(iter(scores.values()))['signature']})" if scores else "") + ". Hours per 90k: "
             "90,000 / updates per second. Paper (Table 1, 90,000 updates of the full model on GPUs): "
             + ", ".join(f"{n} GPU{'s' if n > 1 else ''} {h} h, BLEU {b}" for n, (h, _, b) in PAPER.items())
             + ". Figure: nmt_figure2.png."]
    text = write_table(rows, columns, out / "nmt_table1.md", out / "nmt_table1.csv",
                       title="NMT: Table 1 of the Hogwild paper, one row per run", notes=notes, argv=command)
    text += "\n" + seeds_report(args, plan, results, rows, tests, scores, columns, command, out)
    text += "\n" + heldout_loss_report(args, plan, results, command, out)
    write_runs_json(results, out / "nmt_table1.runs.json")
    print(text)
    return 0


def run_row(args, config: str, seed: int, r, tests: list[TestSet], scores: dict) -> dict:
    summary, final = r.summary, r.summary.get("final_metrics") or {}
    speed = summary.get("updates_per_second") or None
    row = {"run": config, "workers": summary["workers"], "mode": summary["mode"], "seed": seed,
           "updates": summary["updates"], "minutes": round(r.minutes, 2), "updates/s": speed,
           "hours per 90k": round(90000 / speed / 3600, 2) if speed else None,
           "train loss": summary["final_train_loss"], "held-out loss": final.get("loss"),
           "held-out BLEU (greedy, best)": r.heldout(),
           f"held-out BLEU (beam {args.beam})": ((summary.get("heldout") or {}).get("dev") or {}).get("bleu")}
    for test in tests:
        row[f"{test.name} BLEU (beam {args.beam})"] = (scores.get((r.run_dir, test.name)) or {}).get("bleu")
    return row


def heldout_loss_report(args, plan, results, command, out: Path) -> str:
    """Held-out loss at equal updates: each run's periodic evaluations read at six evenly spaced update counts
    (value_at: between evaluations at most one spacing apart, since a line across the steep start would invent
    losses), per run and as mean +- std per configuration, with the curves in nmt_heldout_loss.png."""
    curves = [read_curves(r.run_dir, metric="loss", name=r.label) for r in results]
    plot_curves(curves, out / "nmt_heldout_loss.png", minutes=True,
                title=f"NMT {args.src_lang}->{args.tgt_lang}: held-out loss, {args.updates} updates per run")
    spacing = max(args.updates // 6, 1)
    marks = list(range(spacing, args.updates + 1, spacing))
    columns = [f"at {mark}" for mark in marks]
    rows = [{"run": config, "seed": options.seed,
             **{column: value_at(curve.eval_updates, curve.values, mark, spacing)
                for column, mark in zip(columns, marks)}}
            for (config, _, _, options), curve in zip(plan, curves)]
    summary_rows = seed_summary([config for config, *_ in plan], rows, columns)
    notes = [f"Held-out loss (per token, the first {args.dev_limit or 'all'} sentences of {Path(args.dev).name}) at "
             f"equal updates: the evaluation at that update count, or the straight line between the two either side "
             f"of it when they are at most {spacing} updates apart (else -). Figure: nmt_heldout_loss.png."]
    write_table(rows, ["run", "seed", *columns], out / "nmt_heldout_loss.md", out / "nmt_heldout_loss.csv",
                title="NMT: held-out loss at equal updates, one row per run", notes=notes, argv=command)
    return write_table(summary_rows, ["configuration", "runs", *columns], out / "nmt_heldout_loss_seeds.md",
                       title="NMT: held-out loss at equal updates, mean +- std per configuration", notes=notes,
                       argv=command)


def heldout_bleu(r) -> float:
    """The run's held-out BLEU: beam on the best checkpoint when decoded, else the best greedy evaluation."""
    beam = ((r.summary.get("heldout") or {}).get("dev") or {}).get("bleu")
    value = beam if beam is not None else r.heldout()
    return value if value is not None else float("-inf")


def seeds_report(args, plan, results, rows, tests, scores, columns, command, out: Path) -> str:
    """Mean +- std over seeds per configuration, and the paired bootstrap of the best 1-worker system against the
    best system of each other configuration, on each test set."""
    averaged = [c for c in columns if c not in ("run", "workers", "mode", "seed")]
    summary_rows = seed_summary([config for config, *_ in plan], rows, averaged)
    notes = []
    by_config: dict[str, list] = {}  # configuration -> (seed, result) of its runs
    for (config, _, _, options), result in zip(plan, results):
        by_config.setdefault(config, []).append((options.seed, result))
    configs = list(by_config)
    for test in tests:
        if args.bootstrap < 1 or len(configs) < 2:
            break
        best = {}  # each configuration's system: its seed with the best held-out BLEU (chosen without the test set)
        for config, runs in by_config.items():
            scored = [(heldout_bleu(r), seed, r) for seed, r in runs if (r.run_dir, test.name) in scores]
            if scored:
                best[config] = max(scored, key=lambda item: item[0])[1:]
        if configs[0] not in best or len(best) < 2:
            notes.append(f"{test.name}: no paired bootstrap (a configuration has no decoded test set)")
            continue
        _, references = test.lines()
        systems = [(f"{config} (seed {best[config][0]})",
                    hypothesis_path(best[config][1].run_dir, test, args.beam).read_text(encoding="utf-8").splitlines())
                   for config in configs if config in best]
        found, signature = paired_bootstrap(references, systems, samples=args.bootstrap)
        lines = [f"Paired bootstrap on {test.name} ({len(references)} sentences; sacreBLEU {signature}), baseline "
                 f"{systems[0][0]}; each configuration's system is its seed with the best held-out BLEU:", ""]
        for row in found:
            verdict = "" if row["p_value"] is None else (
                f"; p = {row['p_value']:.4f}: " + ("a significant difference (p < 0.05)" if row["p_value"] < 0.05
                                                   else "no significant difference from the baseline (p >= 0.05)"))
            if row.get("detectable") is not None:
                verdict += f"; this test calls a difference of {row['detectable']:.2f} BLEU or more significant"
            lines.append(f"- {row['system']}: BLEU {row['bleu']:.2f} (bootstrap mean {row['mean']:.2f} +- "
                         f"{row['ci95']:.2f}){verdict}")
        notes.append("\n".join(lines))
    return write_table(summary_rows, ["configuration", "runs", *averaged], out / "nmt_table1_seeds.md",
                       title="NMT: mean +- std over seeds per configuration", notes=notes, argv=command)


if __name__ == "__main__":
    script_entry(main, __file__)
