"""What the reproduction scripts (scripts/reproduce_*.py, scripts/compare_optimizers.py) share: running a series of
labelled training runs one after another, reading their results, time-to-target, and writing Markdown/CSV tables
with the command that produced them (`python -m scripts.NAME ...`, run from the repository root).

Usage: `results = run_series([("SGD, 1 worker", "sgd-1", options)], "runs/x", script_argv(__file__, argv))`;
`write_table(rows, columns, "t.md")`
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import platform
import shlex
import statistics
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hogwild.tasks.options import RunOptions, declared, flag
from hogwild.tasks.run_flags import parse_run_options
from hogwild.tasks.rundir import Curves, read_curves
from hogwild.tasks.summary import read_summary

REPO_ROOT = Path(__file__).resolve().parent.parent  # scripts/ is never installed: it lives in the checkout


def machine() -> str:
    gpus = torch.cuda.device_count() if torch.backends.cuda.is_built() else 0
    return (f"{os.cpu_count()} CPU cores{f', {gpus} GPU(s)' if gpus else ', no GPU'}, {platform.system()}, "
            f"torch {torch.__version__}")


def script_argv(script: str, argv: Sequence[str] | None) -> list[str]:
    """["-m", the script's module (scripts.reproduce_pos), *arguments] (arguments: sys.argv[1:] when None)."""
    module = Path(os.path.relpath(os.path.abspath(script), REPO_ROOT)).with_suffix("")
    return ["-m", ".".join(module.parts), *(sys.argv[1:] if argv is None else argv)]


def command_line(argv: Sequence[str]) -> str:
    """The command as a user would type it from the repo root, for `script_argv(...)`."""
    return shlex.join(["python", *argv])


def series_note(set_per_run: Sequence[str], more: str = "") -> str:
    """The --help paragraph of a series script on run.py's options: every run takes them, but those the series sets
    itself; then `more` (how the script reads some of them)."""
    flags = [declared()[name].negative_flag or flag(name) for name in set_per_run]
    return textwrap.fill("Every run takes run.py's options below (--config FILE reads them from a run directory or "
                         "an options file, as run.py does); the series sets " + ", ".join(flags) + " itself, for "
                         "each run. " + more, width=116)


def add_series_flags(group: argparse._ArgumentGroup, script: str, reuse: str, seeds: str | None = None,
                     only_report: str | None = None) -> None:
    """The flags of a series script's own group: --seeds (given its help), where the runs and the tables go, --reuse
    and --only-report (given its help). The tables and figure go beside the runs (runs/SCRIPT) unless --results-dir
    names a folder: the committed ones in docs/results/ are replaced only when it names them."""
    if seeds is not None:
        group.add_argument("--seeds", default=None, help=seeds)
    group.add_argument("--runs-dir", default=f"runs/{script}", help="where the run directories go")
    group.add_argument("--results-dir", default=argparse.SUPPRESS,
                       help="where the tables and figure go (default: --runs-dir; the committed ones are in "
                            "docs/results/, see its README)")
    group.add_argument("--reuse", action="store_true", help=reuse)
    if only_report is not None:
        group.add_argument("--only-report", action="store_true", help=only_report)


def parse_series_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The script's own values, `args.options` the run options every run of the series starts from, `args.seed_list`
    (with --seeds) and `args.results_dir` (--runs-dir unless given)."""
    options, args = parse_run_options(parser, argv)
    args.options = options
    if hasattr(args, "seeds"):
        args.seed_list = seed_list(parser, args.seeds, options.seed)
    args.results_dir = getattr(args, "results_dir", args.runs_dir)
    return args


def seed_list(parser: argparse.ArgumentParser, seeds: str | None, seed: int) -> list[int]:
    """--seeds '0,1,2' -> [0, 1, 2] (None: [--seed]); a parser error for anything else or a repeated seed."""
    if seeds is None:
        return [seed]
    try:
        found = [int(part) for part in seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, got {seeds!r}")
    if len(set(found)) != len(found):
        parser.error(f"--seeds: {seeds!r} repeats a seed")
    return found


@dataclass
class RunResult:
    label: str
    run_dir: Path
    summary: dict[str, Any]
    curves: Curves

    @property
    def minutes(self) -> float:
        return self.summary["wall_seconds"] / 60.0

    def heldout(self) -> float | None:
        """Best held-out value during training (the metric of summary['best'])."""
        return self.summary["best"]["value"]

    def time_to(self, target: float) -> float | None:
        """Seconds of training until the held-out metric first reached `target` (None: never)."""
        for seconds, value in zip(self.curves.eval_seconds, self.curves.values):
            if value >= target:
                return seconds
        return None


def run_series(runs: Sequence[tuple[str, str, RunOptions]], runs_dir: str | Path, argv: Sequence[str],
               reuse: bool = False, say=print, report_only: bool = False) -> list[RunResult | None]:
    """Train each (label, directory name, options) in turn under runs_dir; one line per run says what happens to it,
    and each run's own output goes to train.log in its run directory. With `reuse`, a run that finished is read back
    instead of trained again, and a run that stopped part-way (killed, interrupted, out of time) resumes from its
    last.pt to the same stop condition. With `report_only` nothing is trained: finished runs are read back and the
    others are None in the returned list (aligned with `runs`); none finished at all is an error naming them.
    argv (script_argv) goes to each command.txt."""
    from hogwild.tasks.training import run_training

    runs_dir = Path(runs_dir)
    if report_only:
        reuse = True
        if all(finished_summary(runs_dir / name) is None for _, name, _ in runs):
            raise SystemExit(f"--only-report: no finished run (summary.json of a run not stopped by a signal) in "
                             f"{', '.join(str(runs_dir / name) for _, name, _ in runs)}; train them first (the same "
                             f"command without --only-report, with --reuse to keep finished runs)")
    results: list[RunResult | None] = []
    for number, (label, name, options) in enumerate(runs, 1):
        run_dir, head = runs_dir / name, f"[{number}/{len(runs)}] {label}:"
        if not (reuse and finished_summary(run_dir) is not None):
            if report_only:
                say(f"{head} not finished, left out of the report ({run_dir})")
                results.append(None)
                continue
            _train_one(run_training, options, run_dir, reuse, argv, head, say)
        summary = read_summary(run_dir)
        say(f"{head} {summary['updates']} updates, {summary['wall_seconds'] / 60:.1f} minutes of training, "
            f"{summary['stop_reason']}, best {summary['best']['metric']} {_cell(summary['best']['value'])} ({run_dir})")
        results.append(RunResult(label, run_dir, summary, read_curves(run_dir, name=label)))
    return results


def _train_one(run_training, options: RunOptions, run_dir: Path, resume: bool, argv: Sequence[str], head: str,
               say) -> None:
    """Train one run of a series, resuming it from its last.pt when `resume` and it has one (else from scratch,
    replacing whatever the directory held); its output goes to <run_dir>/train.log."""
    resuming = resume and (run_dir / "last.pt").exists()
    if run_dir.exists() and not resuming:
        import shutil
        shutil.rmtree(run_dir)
    log_path = run_dir / "train.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    say(f"{head} {'resuming' if resuming else 'training'} -> {run_dir} (output: {log_path})")
    with open(log_path, "a", encoding="utf-8") as log:
        def to_log(message: str) -> None:
            log.write(message + "\n")
            log.flush()
        summary = run_training(dataclasses.replace(options, out=str(run_dir), progress=False, resume=resuming),
                               argv=list(argv), say=to_log)
    if str(summary.get("stop_reason", "")).startswith("signal"):
        raise KeyboardInterrupt(f"{head} interrupted; rerun with --reuse to resume it and keep the finished runs")


def finished(plan: Sequence[Any], results: Sequence[RunResult | None]) -> tuple[list[Any], list[RunResult]]:
    """The entries of `plan` (aligned with run_series' results) whose runs finished, and their results."""
    kept = [(entry, result) for entry, result in zip(plan, results) if result is not None]
    return [entry for entry, _ in kept], [result for _, result in kept]


def finished_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's summary.json if the run finished (an interrupted run writes one too, stopped by a signal: it is
    trained again, not reported)."""
    summary = read_summary(run_dir)
    if summary is None or str(summary.get("stop_reason", "")).startswith("signal"):
        return None
    return summary


def mean_std(values: Sequence[Any]) -> str | None:
    """'mean +- sample std' of the numbers among values (one number: itself; none: None), for per-seed tables."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numbers:
        return None
    if len(numbers) == 1:
        return f"{numbers[0]:.4g}"
    return f"{statistics.mean(numbers):.4g} +- {statistics.stdev(numbers):.2g}"


def seed_summary(configs: Sequence[str], rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[dict]:
    """One row per configuration, in first-seen order: its number of runs and `mean_std` of each column over them
    (configs[i] is the configuration of rows[i])."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for config, row in zip(configs, rows):
        groups.setdefault(config, []).append(row)
    return [{"configuration": config, "runs": len(mine), **{c: mean_std([row[c] for row in mine]) for c in columns}}
            for config, mine in groups.items()]


def value_at(updates: Sequence[int], values: Sequence[float], at: int, gap: int) -> float | None:
    """A curve's value at `at` updates: an evaluation made there, or the straight line between the evaluations either
    side of it when they are at most `gap` updates apart; None otherwise (outside the curve, or across a longer gap,
    where a line would invent the shape). Of two evaluations at one update count (a resumed run that replayed it)
    the later is kept."""
    evaluated = dict(zip(updates, values))
    if at in evaluated:
        return evaluated[at]
    points = sorted(evaluated.items())
    for (u0, v0), (u1, v1) in zip(points, points[1:]):
        if u0 < at < u1:
            return v0 + (v1 - v0) * (at - u0) / (u1 - u0) if u1 - u0 <= gap else None
    return None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def write_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], markdown: str | Path,
                csv_path: str | Path | None = None, title: str = "", notes: Sequence[str] = (),
                argv: Sequence[str] | None = None) -> str:
    """Markdown table (with title, the command, machine and date above it) and optionally the same rows as CSV."""
    lines = [f"# {title}", ""] if title else []
    lines += [f"Command: `{command_line(argv or script_argv(sys.argv[0], None))}`  ",
              f"Machine: {machine()}; date {time.strftime('%Y-%m-%d')}", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    lines += [""] + [f"{note}" for note in notes]
    text = "\n".join(lines).rstrip() + "\n"
    Path(markdown).parent.mkdir(parents=True, exist_ok=True)
    Path(markdown).write_text(text, encoding="utf-8")
    if csv_path is not None:
        with open(csv_path, "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=list(columns), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    return text


def write_runs_json(results: Sequence[RunResult], path: str | Path) -> None:
    """Every run's summary (minus bulky fields) for later inspection."""
    records = [{"label": r.label, "run_dir": str(r.run_dir), **{k: v for k, v in r.summary.items()
                                                                 if k not in ("data",)}} for r in results]
    Path(path).write_text(json.dumps(records, indent=2, default=str) + "\n", encoding="utf-8")


def script_entry(main: Any, script: str) -> None:
    """`if __name__ == "__main__": script_entry(main, __file__)`: exit with main()'s code; Ctrl-C stops the whole
    series with exit 130 and a one-line message (finished runs stay for --reuse)."""
    try:
        sys.exit(main())
    except KeyboardInterrupt as stop:
        print(f"{Path(script).name}: interrupted: {stop}", file=sys.stderr)
        sys.exit(130)
