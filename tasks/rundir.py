"""The run directory: what a training run leaves behind, and how later commands (tag, translate, plot, the
reproduction scripts) read it back.

Layout: `config.json` (sections `run`, `model`, `devices` written by run.py before training; `config` and `command` by
the engine), `command.txt` (the shell command line),
`model.json` + `vocab.*.json` (to rebuild the model), `metrics.jsonl` (train/eval records), `last.pt` and `best.pt`
(checkpoints), `summary.json`, and for NMT `dev.src/dev.ref/dev.hyp` (held-out translations). A multi-host run keeps
each host's engine files in `host<i>/`. While a run trains, `run.lock` names its process (tasks/runlock.py).

Usage: `curves = read_curves(run_dir)`; `spec, state = load_trained(run_dir)`
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hogwild.data.cache import cache_root
from hogwild.data.errors import read_json
from hogwild.files import RecordLog, update_sections
from hogwild.share.checkpoint import CheckpointError, load_file
from hogwild.tasks.runlock import LOCK_FILE, busy, live_holder
from hogwild.tasks.task_job import MODEL_FILE


class RunDirError(ValueError):
    """A run directory is missing a file, or holds one that cannot be read."""


RUN_FILES = (MODEL_FILE, "config.json", "metrics.jsonl", "last.pt", "best.pt", "summary.json")
OWN_FILES = (LOCK_FILE, "train.log")  # a run's before it has any RUN_FILES (train.log: scripts/series.py's output)


def check_out(run_dir: Path, resume: bool, writer: bool = True, locked: bool = False) -> None:
    """--out must be a directory (or not exist yet), a new run must not land on top of another one, nor on a run
    still going there, and --resume needs a last.pt in a folder that holds a run (a fresh start in a new or empty one):
    checked by the process that writes the run directory (other MPI ranks may look after it has begun writing).
    locked: this process holds the run directory's lock already."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--out {run_dir}: is a file, not a directory")
    if run_dir.parent.exists() and not run_dir.parent.is_dir():
        raise RunDirError(f"--out {run_dir}: {run_dir.parent} is a file, not a directory")
    cache, out = cache_root().resolve(), run_dir.resolve()
    if cache == out or cache.is_relative_to(out) or out.is_relative_to(cache):  # the data would land in the run
        raise RunDirError(f"--out {run_dir}: {'is' if cache == out else 'overlaps'} the data cache {cache_root()} "
                          f"($HOGWILD_CACHE): the prepared data and the run's files would mix; give them separate "
                          f"folders")
    holder = live_holder(run_dir) if writer and not locked and run_dir.is_dir() else None
    if holder is not None:  # a run still writing there: not "already holds a run" nor "no last.pt" (not yet)
        raise busy(run_dir, holder)
    held = [name for name in RUN_FILES if (run_dir / name).exists() or (run_dir / "host0" / name).exists()]
    if held and not resume and writer:
        raise RunDirError(f"--out {run_dir}: already holds a run ({', '.join(held)}); add --resume to continue it, or "
                          f"choose another --out")
    if held and resume and writer and "last.pt" not in held:  # a fresh start would replace best.pt, the summary ...
        raise RunDirError(f"--resume {run_dir}: holds a run ({', '.join(held)}) but no last.pt to continue it from "
                          f"(killed before its first checkpoint, or last.pt was removed), and starting it afresh "
                          f"would replace those files; choose another --out, or move them away to start over here")
    others = sorted(name for name in os.listdir(run_dir) if name not in OWN_FILES) if run_dir.is_dir() else []
    if others and not held and writer:  # e.g. --out docs: the run's files would land among someone else's
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise RunDirError(f"--out {run_dir}: holds other files ({shown}) and no run; choose a new or empty --out")


def write_command(run_dir: Path, argv: list[str] | None = None) -> None:
    """Append the command line to command.txt (one whole line per run segment): `python run.py ...`, `python -m
    scripts.NAME ...`, or an installed command as it is (`hogwild ...`)."""
    argv = sys.argv if argv is None else argv
    python = ["python"] if argv and (argv[0] == "-m" or argv[0].endswith(".py")) else []
    log = RecordLog(run_dir / "command.txt")
    try:
        log.append_text(shlex.join([*python, *argv]) + "\n")
    finally:
        log.close()


def write_config(run_dir: Path, **sections: Any) -> None:
    """Set run.py's sections of config.json (`run`, `model`, `devices`). The engine owns `config` and `command`
    and writes them itself when training starts; each section has one writer, and the file is replaced whole."""
    update_sections(run_dir / "config.json", **sections)


def engine_dir(run_dir: Path) -> Path:
    """Where the engine's checkpoints and metrics are: the run directory, or host0/ of a multi-host run."""
    return run_dir / "host0" if not (run_dir / "last.pt").exists() and (run_dir / "host0").is_dir() else run_dir


def run_dir_of(given: str | Path) -> tuple[Path, Path | None]:
    """`--checkpoint` as given: a run directory, or a checkpoint file inside one (RUN/last.pt, RUN/host0/best.pt):
    (the run directory, the file or None)."""
    given = Path(given)
    if not given.is_file():
        return given, None
    folder = given.parent
    if not (folder / MODEL_FILE).exists() and (folder.parent / MODEL_FILE).exists():  # RUN/host0/last.pt
        folder = folder.parent
    return folder, given


def load_trained(run_dir: str | Path, checkpoint: str | Path = "best") -> tuple[dict, dict[str, torch.Tensor], Path]:
    """(model.json contents, model state_dict, checkpoint path) of a run directory; best.pt, else last.pt ("best"),
    last.pt ("last"), or the checkpoint file given (a Path: see `run_dir_of`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"--checkpoint {run_dir}: no such run directory (give the folder run.py wrote, or a "
                          f"checkpoint file in it)")
    spec_path = run_dir / MODEL_FILE
    if not spec_path.exists():
        what = f"{checkpoint} is not inside a run directory" if isinstance(checkpoint, Path) else run_dir
        raise RunDirError(f"--checkpoint {what}: no {MODEL_FILE} in {run_dir} (is it a run.py run directory?)")
    folder = engine_dir(run_dir)
    names = ["best.pt", "last.pt"] if checkpoint == "best" else ["last.pt"]
    path = checkpoint if isinstance(checkpoint, Path) else \
        next((folder / name for name in names if (folder / name).exists()), None)
    if path is None:
        raise RunDirError(f"--checkpoint {run_dir}: no {' or '.join(names)} in {folder}")
    try:
        state = load_file(str(path))  # tensors and plain values only: a crafted file is refused, running nothing
    except CheckpointError as error:
        raise RunDirError(str(error)) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise RunDirError(f"{path}: not a hogwild checkpoint (no 'model' entry)")
    spec = read_json(spec_path)  # not JSON: named with its line and column
    if not isinstance(spec, dict):
        raise RunDirError(f"{spec_path}: not a run's model file (a JSON object with its task and model config)")
    return spec, state["model"], path


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


_NUMBERS = ("time", "elapsed", "updates", "loss")  # record fields plot and the run's clock compute with


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl. A last line without its newline is a record torn by a crash or a full disk:
    it is skipped (the next --resume cuts it off); a bad line anywhere else (not JSON, not a record, a field that
    must be a number and is not) is an error naming it."""
    records = []
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.readlines()
    except UnicodeDecodeError as error:
        raise RunDirError(f"{path}: not a metrics file (not UTF-8 text: byte {error.start} is "
                          f"{error.object[error.start]:#04x})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not line.endswith("\n"):
                break
            raise RunDirError(f"{path}:{number}: not a JSON record ({error.msg})") from None
        if not isinstance(record, dict):
            raise RunDirError(f"{path}:{number}: not a record (a JSON object), got {type(record).__name__}")
        values = [(name, record.get(name)) for name in _NUMBERS]
        metrics = record.get("metrics")
        values += list(metrics.items()) if isinstance(metrics, dict) else [("metrics", metrics)] if metrics else []
        for name, value in values:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise RunDirError(f"{path}:{number}: {name!r} is {value!r}, not a number")
        records.append(record)
    return records


def timeline(records: list[dict[str, Any]]) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """(seconds of training since the run began, record) for every record of a run's segments laid end to end, and
    the second at which the latest segment began. A segment resumes from the last checkpoint of the one before
    (its 'resume' record names that update): what a killed segment logged past it was lost work and is dropped, and
    the new segment's clock starts where the kept records end. (Logs without 'resume' records: a segment starts
    where the previous one's clock ended.)"""
    kept: list[tuple[float, dict[str, Any]]] = []
    base, last = 0.0, 0.0
    for record in records:
        elapsed = record.get("elapsed")
        if elapsed is None:
            continue
        if elapsed < last - 1e-6:  # a new segment
            base += last
        last = elapsed
        if record.get("kind") == "resume":
            resumed = record.get("updates", 0)
            kept = [(s, r) for s, r in kept if r.get("updates", -1) <= resumed]
            base = max((s for s, r in kept if "updates" in r), default=0.0) - elapsed
        kept.append((base + elapsed, record))
    return kept, base


def segment_start(run_dir: str | Path) -> float:
    """Seconds of training before the latest segment of the run in run_dir began (0: a run that never resumed)."""
    path = engine_dir(Path(run_dir)) / "metrics.jsonl"
    return max(timeline(read_metrics(path))[1], 0.0) if path.exists() else 0.0


def restarts_logged(metrics: Path) -> int:
    """Workers replaced in every segment of a run: the restart records of its metrics.jsonl (a killed segment's too)."""
    return sum(record.get("kind") == "restart" for record in read_metrics(metrics)) if metrics.exists() else 0


def read_curves(run_dir: str | Path, metric: str | None = None, name: str | None = None) -> Curves:
    """Curves from metrics.jsonl, the segments of a resumed run laid end to end (`timeline`)."""
    run_dir = Path(run_dir)
    path = engine_dir(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise RunDirError(f"{run_dir}: no metrics.jsonl (not a training run directory?)")
    summary_path = run_dir / "summary.json"
    if metric is None and summary_path.exists():
        summary = read_json(summary_path)
        best = summary.get("best") if isinstance(summary, dict) else None
        metric = best.get("metric") if isinstance(best, dict) else None
    curves = Curves(name or run_dir.name, metric)
    records = read_metrics(path)
    if not any(record.get("kind") in ("train", "eval", "final_eval") for record in records):
        raise RunDirError(f"{path}: no training or evaluation record to plot (the run logged none yet)")
    for seconds, record in timeline(records)[0]:
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
