"""`summary.json`: the headline figures of a run, from the engine's TrainResult plus the final held-out evaluation.

Keys (issue 5): task, workers, devices, mode, updates, wall_seconds, updates_per_second, best {metric, value,
update}, final_train_loss, staleness_mean, skipped_updates, graphs, eager_steps and eager_share (Config.graphs:
graphs captured, steps of graphed workers run eagerly and their share, None without graphed workers), restarts
(workers replaced in the whole run, every segment's restart records in metrics.jsonl, a killed one's too;
--max-restarts bounds each segment); plus final_metrics,
heldout (the best checkpoint's final evaluation), stop_reason, data and the segment figures of a resumed run.
`wall_seconds` and `updates` add up over resumed segments (`prior_seconds`: the training time before this segment,
from the metrics log, which also counts a segment that was killed without writing a summary); `updates_per_second`
is that of the latest segment: its updates per second of training (from every worker ready to the stop: start-up and
the final evaluation excluded), the run's headline rate (run.py's last line; metrics.jsonl's are per interval). When a signal skipped the final held-out evaluation, run.py sets stop_reason to say so
and adds training_stop_reason (why training itself stopped), which a --resume that only runs that evaluation puts
back (tasks/training.py).

Usage: `summary = make_summary(options, devices, result, metric, start, previous, heldout, info, prior_seconds)`
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hogwild.data.errors import read_json
from hogwild.files import write_text_atomic

SUMMARY_FILE = "summary.json"
EAGER_NOTE = 0.01  # the end-of-run line names the eager share above this


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SUMMARY_FILE
    if not path.exists():
        return None
    summary = read_json(path)  # a damaged file is named with its line and column
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: not a run summary (a JSON object), got {type(summary).__name__}")
    return summary


def make_summary(options, devices: list[str], result, metric: str, start_updates: int,
                 previous: dict[str, Any] | None, heldout: dict[str, Any] | None, info: dict[str, Any],
                 prior_seconds: float = 0.0, run_restarts: int | None = None) -> dict:
    """result: hogwild.TrainResult of this call; start_updates: the global step it resumed from (0: fresh);
    run_restarts: the restarts of every segment (None: this call's)."""
    segment_updates = result.updates - start_updates
    wall = result.wall_seconds + (prior_seconds if start_updates else 0.0)
    best = {"metric": metric, "value": None, "update": None}
    if result.best_metrics is not None:
        best = {"metric": metric, "value": result.best_metrics.get(metric), "update": result.best_step}
    if previous and start_updates and previous.get("best", {}).get("value") is not None and (
            best["value"] is None or previous["best"]["value"] > best["value"]):
        best = previous["best"]  # the best evaluation happened in an earlier segment
    return {
        "task": options.task,
        "workers": len(devices),
        "devices": devices,
        "mode": options.mode,
        "updates": result.updates,
        "wall_seconds": round(wall, 3),
        "updates_per_second": round(segment_updates / result.wall_seconds, 4) if result.wall_seconds else 0.0,
        "best": best,
        "final_train_loss": result.final_loss,
        "staleness_mean": result.staleness_mean,
        "skipped_updates": result.skipped_updates,
        "graphs": result.graphs,
        "eager_steps": result.eager_steps,
        "eager_share": result.eager_share,
        "restarts": result.restarts if run_restarts is None else run_restarts,
        "final_metrics": result.final_metrics,
        "heldout": heldout,
        "stop_reason": result.stop_reason,
        "worker_updates": result.worker_updates,
        "examples": result.examples,
        "segments": ((previous or {}).get("segments", 1) + 1) if start_updates else 1,
        "recipe": options.recipe,  # what it picked, below (tasks/defaults.py)
        "optimizer": options.optimizer,
        "lr": options.lr,
        "lr_decay": options.lr_decay,
        "decay_updates": options.decay_updates,
        "word_min_freq": options.word_min_freq,
        "preset": options.preset,
        "distributed": options.distributed,
        "data": info,
    }


def eager_note(summary: dict[str, Any]) -> str | None:
    """The end-of-run line when more than EAGER_NOTE of the graphed workers' steps ran eagerly, else None."""
    share = summary.get("eager_share")
    if share is None or share <= EAGER_NOTE:
        return None
    return (f"{share:.0%} of the graphed workers' steps ran eagerly ({summary['eager_steps']} steps: batch shapes "
            f"without a graph, or a capture that failed; summary.json's eager_share)")


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Replace summary.json whole (a full disk names the file and keeps the previous summary)."""
    write_text_atomic(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str) + "\n")
