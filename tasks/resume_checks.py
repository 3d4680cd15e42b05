"""What a `--resume` must agree with, checked by run.py before anything is written (the engine would find some of it
only after run.py has rewritten config.json and appended to command.txt): the checkpoint's optimizer, and a stop
condition the checkpoint has not reached yet. Each refusal names the flag to change and the checkpoint file.

The job files a resumed run rebuilds from its data and flags (vocabularies, sentencepiece models) must be the run's
own, byte for byte; one the run holds that cannot be read is named as damaged, not blamed on the flags.

A multi-host run resumes on as many training hosts as it had (each host's last.pt holds its own shard's position).

Usage: `check_optimizer(state, path, options)`; `reached = stop_reached(state, options, n_batches)` -> e.g.
("--steps", 2000, 2300) or None; `check_same_files(staged_dir, run_dir)`; `check_hosts(run_dir, hosts, others)`
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from hogwild.data.subwords import SubwordModel
from hogwild.shared_optim import SharedOptimizer
from hogwild.tasks.task_job import MODEL_FILE

# Files a resumed run must share with the run it continues: the same ids for the same words. data.json (corpus
# statistics, paths as given) and model.json (sizes; the checkpoint's shapes are checked instead) may differ.
_NOT_COMPARED = ("data.json", MODEL_FILE)


class ResumeError(ValueError):
    """A --resume that cannot continue the run as asked; the run directory is left as it was."""


def check_hosts(run_dir: Path, hosts: int, other_ranks: int) -> None:
    """Every host<i>/ folder of the run must hold a last.pt, and the training hosts of this job must be as many
    (other_ranks: the job's server and tester ranks, to say which mpiexec -n resumes it). An aborted job may end
    before every host has written its last.pt (docs/multihost.md): such a run cannot continue on all its hosts."""
    folders = sorted((path.name for path in run_dir.glob("host*") if re.fullmatch(r"host\d+", path.name)
                      and path.is_dir()), key=lambda name: int(name[4:]))
    trained = [name for name in folders if (run_dir / name / "last.pt").exists()]
    if not trained:
        return  # nothing to resume from: check_out decides (a fresh start, or a refusal)
    missing = [name for name in folders if name not in trained]
    if missing:
        raise ResumeError(f"--resume: {run_dir} was trained on {len(folders)} hosts, and {', '.join(missing)} holds "
                          f"no last.pt (the job ended before that host wrote one: an abort, or a rank killed), so "
                          f"its hosts cannot all continue; the run is left as it was. Start it again in another "
                          f"--out (--checkpoint-every makes every host write last.pt as it trains)")
    if len(trained) != hosts:
        raise ResumeError(f"--resume: {run_dir} was trained on {len(trained)} hosts ({', '.join(trained)} hold "
                          f"their last.pt), this job has {hosts} training rank(s): resume it under mpiexec -n "
                          f"{len(trained) + other_ranks} as it ran (each host continues its own shard of the data)")


def check_optimizer(state: dict[str, Any], path: Path, options) -> None:
    """The checkpoint's optimizer state must be the one this run's --optimizer (and --momentum) keeps: another
    optimizer's moments cannot be continued."""
    saved = state["optimizer"]
    name = saved.get("name")
    if name != options.optimizer:
        raise ResumeError(f"--optimizer {options.optimizer}: {path} holds the state of --optimizer {name}; resume "
                          f"with --optimizer {name} (a run keeps its optimizer), or start a new run in another --out")
    kept = sorted(_state_keys(options.optimizer, options.optimizer_args()))
    held = sorted(saved["state"][0]) if saved.get("state") else kept
    if held != kept:
        momentum = saved.get("hyper", {}).get("momentum")
        raise ResumeError(f"--momentum {options.momentum}: {path} holds optimizer state {held} per parameter, "
                          f"--optimizer {name} with these flags keeps {kept}; resume with the run's --momentum "
                          f"({momentum})")


def _state_keys(name: str, hyper: dict[str, Any]) -> set[str]:
    """The per-parameter state keys of a SharedOptimizer(name, **hyper), read off a one-element instance."""
    return set(SharedOptimizer([torch.zeros(1).share_memory_()], name, **hyper).state[0])


def stop_reached(state: dict[str, Any], options, n_batches: int) -> tuple[str, int, int] | None:
    """The stop condition the checkpoint has already reached, so that resuming would train nothing: (its flag, the
    value given, how far the checkpoint is on that measure): --steps (updates made), --epochs (passes over the data
    the feed completed). None: there is training left (a --time-limit counts per segment)."""
    if options.steps is not None and int(state["global_step"]) >= options.steps:
        return "--steps", options.steps, int(state["global_step"])
    done = epochs_done(state["data_position"], n_batches, options.data_assignment == "partition")
    if options.epochs is not None and done >= options.epochs:
        return "--epochs", options.epochs, done
    return None


def epochs_done(position: dict[str, Any], n_batches: int, partition: bool) -> int:
    """Whole passes over the data a checkpoint's data position has completed: queue and sync modes count the batch
    tickets handed out in order; partition mode the slowest worker's shard (range(w, n, workers))."""
    if not partition:
        return int(position["seq"]) // n_batches
    shards = position["workers"]
    return min(epoch + int(done >= len(range(w, n_batches, len(shards))))
               for w, (epoch, done) in enumerate(shards))


def nothing_to_train(path: Path, reached: tuple[str, int, int], updates: int) -> ResumeError:
    flag, value, at = reached
    return ResumeError(f"{flag} {value}: {path} is already at update {updates}, where {flag} {value} stops the run: "
                       f"nothing to train (the run is left as it was); give a larger {flag} than {at} to continue it")


def check_same_files(staged: Path, run_dir: Path) -> None:
    """Each job file built from this command's data and flags (in `staged`) must equal the run's own copy."""
    for path in sorted(staged.iterdir()):
        if path.name in _NOT_COMPARED:
            continue
        existing = run_dir / path.name
        if not existing.exists() or existing.read_bytes() == path.read_bytes():
            continue
        damage = _unreadable(existing)
        if damage:
            raise ResumeError(f"--resume: {existing} is damaged ({damage}); the run cannot continue with it. The same "
                              f"data and flags rebuild it as {path.name}: restore the file from a copy, or start a new "
                              f"run in another --out; the run is left as it was")
        raise ResumeError(f"--resume: {existing} differs from the one built from this command's data and flags "
                          f"(another --train, --format, --tag, --vocab-size or --seed?); the run is left as it was")


def _unreadable(path: Path) -> str | None:
    """Why a run's job file cannot be read in its format (a sentencepiece model, JSON), or None when it can."""
    try:
        if path.suffix == ".model":
            SubwordModel(path)
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
    except (OSError, RuntimeError, UnicodeDecodeError, ValueError) as error:
        return f"{type(error).__name__}: {error}".strip()
    return None
