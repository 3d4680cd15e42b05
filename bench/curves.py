"""Held-out curves of benchmark runs and their tables: when each run first reached a level, in minutes and
updates, and its time ratio to the 1-worker run's (bench_convergence's target table and --levels table).

Usage: `report({"single": curve1, "hogwild2": curve2}, 0.95)` prints the table and returns its rows.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from hogwild.tasks.task_job import TaskJob

TARGETS = (("hogwild2", "single", 0.55), ("hogwild2", "sync2", 0.8))  # the issue's: time ratio must be <= this
LOWER_IS_BETTER = ("perplexity", "loss")


def reaches(value: float, target: float, metric: str) -> bool:
    return value <= target if metric in LOWER_IS_BETTER else value >= target


def best_of(values, metric: str) -> float:
    return min(values) if metric in LOWER_IS_BETTER else max(values)


@dataclass
class Curve:
    """One run's evaluations: seconds since its start (at the snapshot), updates seen, held-out metric."""
    variant: str
    metric: str  # what "metric" holds in each point: the task's own (bleu, accuracy) or --metric
    points: list[dict] = field(default_factory=list)
    stop_reason: str = ""

    def first_reaching(self, target: float) -> dict | None:
        return next((p for p in self.points if reaches(p["metric"], target, self.metric)), None)

    def best(self) -> float:
        return best_of((p["metric"] for p in self.points), self.metric)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A private copy of the parameters and buffers, for offline scoring."""
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def scores(job: TaskJob, model: torch.nn.Module, metric: str) -> dict:
    """A snapshot's held-out scores for its point: `metric`, the target's, and the evaluation's other numbers
    (NMT: greedy BLEU, held-out loss and perplexity) under 'heldout' when there are any."""
    metrics = job.evaluate(model)
    others = {name: value for name, value in metrics.items() if name != metric}
    return {"metric": metrics[metric], **({"heldout": others} if others else {})}


def stop_at(args: argparse.Namespace) -> float:
    """The hardest of the target and the --levels: online runs stop there, offline scoring scores up to it."""
    return best_of([args.target] + (args.levels or []), args.metric)


def cell(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def describe_point(point: dict) -> str:
    return f"{point['seconds'] / 60:.2f} min, {point.get('updates')} updates"


def time_to(point: dict | None, base: dict | None) -> dict:
    """Minutes and updates of the first point at a level, and its time ratio to `base` (single's first point
    there); None where a run did not get there."""
    return {"minutes": point["seconds"] / 60 if point else None, "updates": point.get("updates") if point else None,
            "ratio_to_single": point["seconds"] / base["seconds"] if point and base else None}


def report(curves: dict[str, Curve], target: float) -> dict[str, dict]:
    """The table: minutes and updates to target, ratio of minutes to single's; then the issue's targets."""
    reached = {v: c.first_reaching(target) for v, c in curves.items()}
    print(f"\n| variant | minutes to {target} | updates to {target} | time ratio to single | best |")
    print("|---|---|---|---|---|")
    rows = {}
    for variant, curve in curves.items():
        rows[variant] = row = {**time_to(reached[variant], reached.get("single")), "best": curve.best(),
                               "evaluations": curve.points}
        print(f"| {variant} | {cell(row['minutes'])} | {cell(row['updates'], 'd')} "
              f"| {cell(row['ratio_to_single'], '.3f')} | {row['best']:.4f} |")
    for top, bottom, bound in TARGETS:
        if reached.get(top) and reached.get(bottom):
            ratio = reached[top]["seconds"] / reached[bottom]["seconds"]
            print(f"{top}/{bottom} time to target = {ratio:.3f}   target <= {bound}   "
                  f"{'met' if ratio <= bound else 'MISSED'}")
        elif top in curves and bottom in curves:
            print(f"{top}/{bottom}: not measured (a run did not reach the target)")
    return rows


def report_levels(curves: dict[str, Curve], levels: list[float]) -> dict[str, dict[str, dict]]:
    """The --levels table: each variant's minutes and updates to each level, and its time ratio to single's there.
    Returns {level: {variant: {"minutes", "updates", "ratio_to_single"}}} (None where a run did not get there)."""
    others = [v for v in curves if v != "single"] if "single" in curves else []
    columns = [f"{v} minutes (updates)" for v in curves] + [f"{v}/single" for v in others]
    print(f"\n| level | {' | '.join(columns)} |")
    print("|---" * (len(columns) + 1) + "|")
    table = {}
    for level in levels:
        reached = {v: c.first_reaching(level) for v, c in curves.items()}
        table[str(level)] = row = {v: time_to(point, reached.get("single")) for v, point in reached.items()}
        cells = [f"{cell(row[v]['minutes'])} ({cell(row[v]['updates'], 'd')})" for v in curves]
        cells += [cell(row[v]["ratio_to_single"], ".3f") for v in others]
        print(f"| {level} | {' | '.join(cells)} |")
    return table
