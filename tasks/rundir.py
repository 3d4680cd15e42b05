"""The run directory: what a training run leaves behind, and how later commands (tag, translate, plot, the
reproduction scripts) read it back.

Layout: `config.json` (engine config + the run's options + command), `command.txt` (the shell command line),
`model.json` + `vocab.*.json` (to rebuild the model), `metrics.jsonl` (train/eval records), `last.pt` and `best.pt`
(checkpoints), `summary.json`, and for NMT `dev.src/dev.ref/dev.hyp` (held-out translations). A multi-host run keeps
each host's engine files in `host<i>/`.

Usage: `curves = read_curves(run_dir)`; `spec, state = load_trained(run_dir)`
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hogwild.tasks.job import MODEL_FILE


class RunDirError(ValueError):
    """A run directory is missing a file, or holds one that cannot be read."""


def write_command(run_dir: Path, argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    with open(run_dir / "command.txt", "a", encoding="utf-8") as file:
        file.write(shlex.join(["python", *argv]) + "\n")


def merge_config(run_dir: Path, **sections: Any) -> None:
    """Add sections to config.json (the engine writes its own part there when training starts)."""
    path = run_dir / "config.json"
    values = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    values.update(sections)
    path.write_text(json.dumps(values, indent=2, default=str) + "\n", encoding="utf-8")


def engine_dir(run_dir: Path) -> Path:
    """Where the engine's checkpoints and metrics are: the run directory, or host0/ of a multi-host run."""
    return run_dir / "host0" if not (run_dir / "last.pt").exists() and (run_dir / "host0").is_dir() else run_dir


def load_trained(run_dir: str | Path, checkpoint: str = "best") -> tuple[dict, dict[str, torch.Tensor], Path]:
    """(model.json contents, model state_dict, checkpoint path) of a run directory; best.pt, else last.pt."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"--checkpoint {run_dir}: no such run directory")
    spec_path = run_dir / MODEL_FILE
    if not spec_path.exists():
        raise RunDirError(f"--checkpoint {run_dir}: no {MODEL_FILE} there (is it a run.py run directory?)")
    folder = engine_dir(run_dir)
    names = ["best.pt", "last.pt"] if checkpoint == "best" else ["last.pt"]
    path = next((folder / name for name in names if (folder / name).exists()), None)
    if path is None:
        raise RunDirError(f"--checkpoint {run_dir}: no {' or '.join(names)} in {folder}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001 - a truncated or foreign file: say which
        raise RunDirError(f"{path}: cannot read the checkpoint ({error})") from None
    return json.loads(spec_path.read_text(encoding="utf-8")), state["model"], path


@dataclass
class Curves:
    """A run's training loss and held-out metric over cumulative training time and updates."""

    name: str
    metric: str | None = None
    loss_seconds: list[float] = field(default_factory=list)
    loss_updates: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)
    eval_updates: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise RunDirError(f"{path}:{number}: not a JSON record ({error.msg})") from None
    return records


def read_curves(run_dir: str | Path, metric: str | None = None, name: str | None = None) -> Curves:
    """Curves from metrics.jsonl. A resumed run restarts 'elapsed' at 0: segments are laid end to end."""
    run_dir = Path(run_dir)
    path = engine_dir(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise RunDirError(f"{run_dir}: no metrics.jsonl (not a training run directory?)")
    summary_path = run_dir / "summary.json"
    if metric is None and summary_path.exists():
        metric = json.loads(summary_path.read_text(encoding="utf-8")).get("best", {}).get("metric")
    curves = Curves(name or run_dir.name, metric)
    offset, last = 0.0, 0.0
    for record in read_metrics(path):
        elapsed = record.get("elapsed")
        if elapsed is None:
            continue
        if elapsed < last - 1e-6:  # a new segment (resume): continue from where the previous one ended
            offset += last
        last = elapsed
        seconds = offset + elapsed
        if record.get("kind") == "train" and record.get("loss") is not None:
            curves.loss_seconds.append(seconds)
            curves.loss_updates.append(record["updates"])
            curves.loss.append(record["loss"])
        elif record.get("kind") in ("eval", "final_eval"):
            values = record.get("metrics", {})
            curves.metric = curves.metric or next(iter(values), None)
            if curves.metric in values:
                curves.eval_seconds.append(seconds)
                curves.eval_updates.append(record["updates"])
                curves.values.append(values[curves.metric])
    return curves
