"""One training run end to end: options -> job -> hogwild.train (or the MPI entry point) -> run directory with
config.json, command.txt, metrics.jsonl, checkpoints, summary.json and (NMT) held-out translations.

Prints the held-out metric at every evaluation (starting with the untrained model at update 0), so that learning is
visible on the console, and a one-line result at the end.

Usage: `summary = run_training(RunOptions(task="pos", workers=2, time_limit=60, out="runs/pos"))`
"""
from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

import hogwild
from hogwild.files import write_atomic
from hogwild.share.checkpoint import check_fits, check_resumable, read_checkpoint
from hogwild.share.resources import check_resources, tensor_nbytes
from hogwild.shared_optim import SharedOptimizer
from hogwild.tasks.devices import worker_devices
from hogwild.tasks.final_signals import FinalSignals
from hogwild.tasks.job_builders import build_job
from hogwild.tasks.options import RunOptions
from hogwild.tasks.resume_checks import check_hosts, check_optimizer, check_same_files, nothing_to_train, stop_reached
from hogwild.tasks.rundir import RunDirError, check_out, restarts_logged, segment_start, write_command, write_config
from hogwild.tasks.runlock import LOCK_FILE, RunDirLock
from hogwild.tasks.summary import eager_note, make_summary, read_summary, write_summary
from hogwild.tasks.task_job import TaskJob


def _say(message: str) -> None:
    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()


def _format(metrics: dict[str, float], main: str) -> str:
    shown = [main] + [k for k in metrics if k != main and k not in ("tokens", "unk_tokens", "sentences", "beam")]
    return "  ".join(f"{k} {metrics[k]:.4f}" for k in shown
                     if isinstance(metrics.get(k), (int, float)) and not isinstance(metrics[k], bool))


def default_out(task: str) -> str:
    return os.path.join("runs", f"{task}-{time.strftime('%Y%m%d-%H%M%S')}")


def _watched(job: TaskJob, started: list[float], say: Callable[[str], None]) -> Callable:
    """evaluate() that also prints each held-out evaluation with the time since training started."""
    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        metrics = job.evaluate(model)
        say(f"[eval] {time.time() - started[0]:7.1f}s  held-out {_format(metrics, job.metric)}")
        return metrics
    return evaluate


def run_training(options: RunOptions, argv: list[str] | None = None,
                 say: Callable[[str], None] = _say) -> dict[str, Any]:
    """Train as `options` say; returns the summary (also written to <out>/summary.json).

    Everything is checked before anything is written: flags, corpora, and for --resume the checkpoint against the
    model, the data and the run's vocabularies. An existing run directory is locked first (run.lock), so a second
    run on it stops at once; a run that fails those checks leaves the directory as it found it."""
    options = options.resolved()
    if options.out is None:
        options.out = default_out(options.task)
    devices = worker_devices(options.gpus, options.workers, options.mode, options.workers_per_gpu,
                             options.cpu_workers)
    torch.set_num_threads(options.threads_per_worker)
    rank_is_first, dist = True, None
    if options.distributed:
        from hogwild.multihost import import_mpi
        from hogwild.multihost.dist_config import ranks_with
        dist = options.dist_config()
        world = import_mpi().COMM_WORLD
        hosts = ranks_with(dist.roles(world.Get_size()), "worker")
        rank_is_first = world.Get_rank() == hosts[0]
        if options.resume:
            check_hosts(Path(options.out), len(hosts), world.Get_size() - len(hosts))
    if not rank_is_first:
        say = lambda message: None  # noqa: E731 - one rank speaks for the job
    with _RunDirOwner(Path(options.out), options.resume, rank_is_first, say) as owner:
        return _train(options, devices, dist, owner, argv, say)


class _RunDirOwner:
    """The run directory as this process holds it: checked at once; locked at once when it exists, else created and
    locked only when the run is known to be valid (`claim`); released (run.lock removed) however the run ends.
    Only the writer (the first training rank of an MPI job) locks and writes."""

    def __init__(self, run_dir: Path, resume: bool, writer: bool, say: Callable[[str], None]):
        self.run_dir, self.resume, self.writer, self.say = run_dir, resume, writer, say
        self._lock: RunDirLock | None = None
        check_out(run_dir, resume, writer)
        self._before = set(os.listdir(run_dir)) if run_dir.is_dir() else None  # None: this run creates it
        if writer and run_dir.is_dir():
            self._take()

    def _take(self) -> None:
        self._lock = RunDirLock(self.run_dir).acquire()
        if self._lock.took_over:
            self.say(f"{self.run_dir}: took over the lock of pid {self._lock.took_over.get('pid')} (no longer "
                     f"running)")

    def claim(self) -> None:
        """Create and lock a run directory that did not exist at the start (the writer only)."""
        if self.writer and self._lock is None:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # a read-only folder, /proc/...: named with the flag, not a bare [Errno N]
                raise RunDirError(f"--out {self.run_dir}: cannot create it ({(error.strerror or str(error)).lower()}"
                                  f"{f': {error.filename}' if error.filename else ''})") from None
            self._take()
            check_out(self.run_dir, self.resume, locked=True)  # another run may have filled it while we loaded data

    def __enter__(self) -> "_RunDirOwner":
        return self

    def __exit__(self, kind, error, trace) -> None:
        refused = kind is not None and self.writer and not self._trained()
        if refused:
            self._remove_new_files()  # while still holding the lock: no other run is writing here
        if self._lock is not None:
            self._lock.release()
        if refused and self._before is None:
            with suppress(OSError):
                self.run_dir.rmdir()

    def _trained(self) -> bool:
        """Whether training began here (a record or a checkpoint exists): from then on the run directory stays."""
        return any((folder / name).exists() for folder in (self.run_dir, self.run_dir / "host0")
                   for name in ("metrics.jsonl", "last.pt", "best.pt", "summary.json"))

    def _remove_new_files(self) -> None:
        """A start refused after the run directory was written (the engine's /dev/shm or memory check): what this
        run added goes, so that the same command is not then refused as "already holds a run"."""
        if not self.run_dir.is_dir() or (self.resume and self._before):
            return
        for entry in self.run_dir.iterdir():
            if entry.name not in (self._before or ()) and entry.name != LOCK_FILE:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)


def _train(options: RunOptions, devices: list[str], dist, owner: _RunDirOwner, argv: list[str] | None,
           say: Callable[[str], None]) -> dict[str, Any]:
    run_dir, rank_is_first = owner.run_dir, owner.writer
    engine_dir = run_dir / "host0" if options.distributed else run_dir
    job, config, start_updates, finish_only = _checked_job(options, devices, owner, engine_dir, dist, say)
    previous = read_summary(run_dir) if start_updates else None
    if rank_is_first:
        write_command(run_dir, argv)
        write_config(run_dir, run=options.to_dict(), model=job.model_spec, devices=devices)
    if finish_only:
        return _finish_only(job, config, previous, run_dir, engine_dir, say)
    started = [time.time()]
    evaluate = _watched(job, started, say)
    say(f"training with {len(devices)} worker(s) on {', '.join(sorted(set(devices)))} ({options.mode}, "
        f"{options.optimizer} lr {options.lr}); run directory {run_dir}")
    started[0] = time.time()
    hosts = 1
    if dist is not None:
        from hogwild.multihost import train_distributed
        outcome = train_distributed(job.model, job.loss_fn, job.batches, config, dist, evaluate)
        if not rank_is_first:
            return {"rank": outcome.rank, "role": outcome.role}
        result, hosts = outcome.local, outcome.hosts
    else:
        result = hogwild.train(job.model, job.loss_fn, job.batches, config, evaluate)
    interrupted = result.stop_reason.startswith("signal")
    with FinalSignals(result.late_signal) as signals:  # a signal (from the engine's end on) stops the final evaluation
        heldout = None
        if not interrupted:
            # the final (beam) decoding runs where the periodic evaluations ran: a GPU when the workers were on GPUs
            heldout = signals.run(lambda: job.finish(_best_model(job, result.best_checkpoint, config), run_dir))
        summary = make_summary(options, devices, result, job.metric, start_updates, previous, heldout, job.info,
                               prior_seconds=segment_start(engine_dir) if start_updates else 0.0,
                               run_restarts=restarts_logged(engine_dir / "metrics.jsonl"))
        summary["hosts"] = hosts
        if signals.skipped:
            summary.update(stop_reason=f"{signals.skipped} during the final held-out evaluation, which was skipped "
                                       f"(training had stopped: {result.stop_reason})",
                           training_stop_reason=result.stop_reason)
        write_summary(run_dir, summary)
    best = summary["best"]
    say(f"done ({summary['stop_reason']}): {result.updates} updates in {summary['wall_seconds']:.1f} s of training"
        f"{_rate(summary, result.updates - start_updates)}, final train loss {_number(result.final_loss)}, best "
        f"held-out {best['metric']} {_number(best['value'])} at update {best['update']}")
    note = eager_note(summary)
    if note:  # the graphed step ran eagerly for a share of the run
        say(note)
    if heldout:
        say("final held-out: " + "; ".join(f"{part} {_format(values, job.metric)}"
                                           for part, values in heldout.items()))
    if interrupted:
        say(f"interrupted: continue with the same command plus --resume --out {run_dir}")
    elif signals.skipped:
        say(f"interrupted: the same command plus --resume --out {run_dir} runs the final held-out evaluation")
    return summary


def _best_model(job: TaskJob, best_checkpoint: str | None, config: hogwild.Config) -> torch.nn.Module:
    """The job's model with the best checkpoint's parameters (else as trained), on the evaluation device."""
    best = copy.deepcopy(job.model)
    if best_checkpoint:
        best.load_state_dict(read_checkpoint(best_checkpoint)["model"])
    return best.to(config.evaluation_device(after_training=True)).eval()


def _finish_only(job: TaskJob, config: hogwild.Config, previous: dict[str, Any], run_dir: Path, engine_dir: Path,
                 say: Callable[[str], None]) -> dict[str, Any]:
    """--resume of a run that finished training but whose final held-out evaluation a signal skipped: that
    evaluation alone, then its summary completed (no worker is started)."""
    best = engine_dir / "best.pt"
    say(f"training finished at update {previous['updates']} ({previous['training_stop_reason']}); running the final "
        f"held-out evaluation that was skipped")
    with FinalSignals() as signals:
        heldout = signals.run(lambda: job.finish(_best_model(job, str(best) if best.exists() else None, config),
                                                 run_dir))
        summary = dict(previous, heldout=heldout)
        if not signals.skipped:
            summary["stop_reason"] = summary.pop("training_stop_reason")
        write_summary(run_dir, summary)
    if heldout:
        say("final held-out: " + "; ".join(f"{part} {_format(values, job.metric)}"
                                           for part, values in heldout.items()))
    return summary


def _checked_job(options: RunOptions, devices: list[str], owner: _RunDirOwner, engine_dir: Path, dist,
                 say: Callable[[str], None]) -> tuple[TaskJob, hogwild.Config, int, bool]:
    """Build the engine's Config, load the data and build the job, check a --resume against it (and the checkpoint's
    optimizer and stop condition: tasks.resume_checks) and the machine against it, then (only then) create or take
    the run directory and install the job's files. Returns (job, config, update resumed from or 0, whether only the
    final held-out evaluation is left to do: a finished run whose evaluation a signal skipped)."""
    resume_path = engine_dir / "last.pt"
    resume_state = read_checkpoint(str(resume_path)) if options.resume and resume_path.exists() else None
    start_updates = int(resume_state["global_step"]) if resume_state is not None else 0
    # A value the engine refuses names its flag here, before the data loads. A fresh run also scores its starting
    # parameters: the engine does that on its evaluation thread, inside the time limit and the evaluation budget.
    config = options.engine_config(devices, eval_at_start=not start_updates)
    loading = time.time()
    fixed_shapes = config.graphed(devices[0]) or config.compile != "off"  # no host read, a few batch shapes
    job = build_job(options, fixed_shapes=fixed_shapes)
    n_params = sum(p.numel() for p in job.model.parameters())
    say(f"{options.task}: {_data_line(job.info, options.max_len)}; model '{options.preset}' with {n_params:,} parameters; "
        f"{len(job.batches)} batches per epoch (data ready in {time.time() - loading:.1f}s)")
    finish_only = False
    with tempfile.TemporaryDirectory(prefix="hogwild-run-") as staging:
        job.write_files(Path(staging))  # model.json, vocabularies: compared with the run's, or copied into it
        if resume_state is not None:
            check_fits(resume_state, str(resume_path), job.model)
            check_resumable(resume_state, str(resume_path), len(job.batches), options.data_assignment, len(devices))
            check_optimizer(resume_state, resume_path, options)
            reached = stop_reached(resume_state, options, len(job.batches))
            finish_only = reached is not None and dist is None and _evaluation_skipped(owner.run_dir, start_updates)
            if reached is not None and not finish_only:
                raise nothing_to_train(resume_path, reached, start_updates)
            check_same_files(Path(staging), owner.run_dir)
        _check_machine(job, devices, options)
        del resume_state  # the engine reads it again (its tensors are not needed here)
        if options.resume and not finish_only:
            say(f"resuming {resume_path} at update {start_updates}" if start_updates else
                f"--resume: {owner.run_dir} holds no run yet, starting one")
        if owner.writer:  # known valid: from here on the run directory is written
            owner.claim()
            if not start_updates:
                _install_files(Path(staging), owner.run_dir)
    return job, config, start_updates, finish_only


def _evaluation_skipped(run_dir: Path, updates: int) -> bool:
    """Whether the run's summary says a signal skipped the final held-out evaluation of the training that ended at
    `updates` (the checkpoint being resumed)."""
    previous = read_summary(run_dir)
    return bool(previous and previous.get("training_stop_reason") and previous.get("updates") == updates)


def _check_machine(job: TaskJob, devices: list[str], options: RunOptions) -> None:
    """The engine's checks that depend on the data and the machine, here before anything is written: a batch per
    worker in partition mode; cores and memory (a warning, or a refusal naming --workers)."""
    if options.data_assignment == "partition" and len(job.batches) < len(devices):
        raise ValueError(f"--data-assignment partition needs at least one batch per worker: {len(job.batches)} "
                         f"batches for {len(devices)} workers")
    params = list(job.model.parameters())
    optimizer_bytes = SharedOptimizer.state_nbytes(params, options.optimizer, **options.optimizer_args())
    check_resources(devices, options.threads_per_worker, tensor_nbytes(job.model.state_dict()), optimizer_bytes,
                    tensor_nbytes(job.batches))


def _install_files(staged: Path, run_dir: Path) -> None:
    """Copy the staged job files into the run directory, each replaced whole (a full disk names the file)."""
    for path in sorted(staged.iterdir()):
        if path.is_file():
            data = path.read_bytes()
            write_atomic(run_dir / path.name, lambda file, data=data: file.write(data))


def _rate(summary: dict[str, Any], updates: int) -> str:
    """The headline rate as the summary defines it: updates per second of training, start-up excluded, this
    segment's (a resumed run's time and updates above are the whole run's)."""
    rate = f"{summary['updates_per_second']:.2f} updates/s, start-up excluded"
    if summary["segments"] == 1:
        return f" ({rate})"
    return f" over {summary['segments']} segments (this one: {updates} updates, {rate})"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _data_line(info: dict[str, Any], max_len: int | None = None) -> str:
    if "train_sentences" in info:
        return (f"{info['train_sentences']:,} training sentences, {info.get('dev_eval_sentences', 0):,} held-out "
                f"for evaluation, {info['words']:,} words / {info['chars']:,} chars / {info['tags']:,} tags")
    return (f"{info.get('train_pairs', 0):,} training pairs{_pairs_not_trained(info.get('train'), max_len)}, "
            f"{info.get('dev_eval_sentences', 0):,} held-out for evaluation, vocabularies "
            f"{info.get('src_vocab', 0):,} / {info.get('tgt_vocab', 0):,}")


def _pairs_not_trained(counts: dict[str, int] | None, max_len: int | None) -> str:
    """Where the lines of --train that are not training pairs went (longer than --max-len units: Moses words or
    subword pieces, which may be many more), e.g. " (of 12 lines: 4 over --max-len 30 units, dropped; 1 empty, dropped)"."""
    if not counts or not counts.get("total"):
        return ""
    parts = [f"{counts[key]:,} {what}" for key, what in (
        ("dropped_long", f"over --max-len {max_len} units, dropped"), ("dropped_empty", "empty, dropped"),
        ("held_out", "held out as the dev set")) if counts.get(key)]
    return f" (of {counts['total']:,} lines: {'; '.join(parts)})" if parts else ""
