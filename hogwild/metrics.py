"""Training metrics, computed in the parent from the workers' shared counters.

Per worker and in total: updates/s, examples (or tokens)/s, mean training loss, skipped updates; staleness (shared
updates that landed between a worker's read of the parameters and its write) as mean and histogram. Written as
JSON lines to `<run dir>/metrics.jsonl`, as TensorBoard events when tensorboard is installed, and shown on a tqdm
progress bar (on a terminal; when stderr is a file, as a plain `progress:` line every PLAIN_PROGRESS_SECONDS).
Records are appended whole (hogwild.files.RecordLog): never half a line, even on a full disk.

Serves steps 4 and 5 of `hogwild.train` (supervise, result).

Usage: `log = MetricsLog(run_dir, workers=2, total=1000); log.progress(snapshot); log.record(snapshot); log.close()`
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from .counters import EXAMPLES, LAST_LR, LOSS_COUNT, LOSS_SUM, PHASE_COLUMNS, PHASES, SKIPPED, STALENESS_SUM, UPDATES
from .files import RecordLog

PLAIN_PROGRESS_SECONDS = 30.0  # a progress line in a log file this often: 20 lines in a 10-minute run


def staleness_summary(ints: np.ndarray, histogram: np.ndarray) -> tuple[float, list[int]]:
    """(mean staleness over all applied updates, histogram summed over workers)."""
    updates = int(ints[:, UPDATES].sum())
    mean = float(ints[:, STALENESS_SUM].sum()) / updates if updates else 0.0
    return mean, [int(x) for x in histogram.sum(axis=0)]


def phase_milliseconds(ints: np.ndarray, floats: np.ndarray, before_ints: np.ndarray | None = None,
                       before_floats: np.ndarray | None = None) -> dict[str, float]:
    """Mean milliseconds per applied update in each phase (pull, compute, push, update), over all workers."""
    seconds, updates = floats[:, PHASE_COLUMNS].sum(axis=0), float(ints[:, UPDATES].sum())
    if before_floats is not None:
        seconds = seconds - before_floats[:, PHASE_COLUMNS].sum(axis=0)
        updates -= float(before_ints[:, UPDATES].sum())
    return {name: (1000 * float(s) / updates if updates else 0.0) for name, s in zip(PHASES, seconds)}


def _mean_loss(floats: np.ndarray, before: np.ndarray | None) -> float | None:
    """Mean training loss over the updates since `before` (rows: workers)."""
    loss, count = floats[..., LOSS_SUM].sum(), floats[..., LOSS_COUNT].sum()
    if before is not None:
        loss, count = loss - before[..., LOSS_SUM].sum(), count - before[..., LOSS_COUNT].sum()
    return float(loss / count) if count > 0 else None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream
        return False


class PlainProgress:
    """The progress bar's stand-in when stderr is not a terminal: one plain line every `every` seconds (and one at
    the end) instead of a `\\r` redraw per update that a log file keeps whole. The tqdm calls MetricsLog makes."""

    def __init__(self, total: int | None, every: float = PLAIN_PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.monotonic, stream=None):
        self.total, self.every, self.clock, self.stream = total, every, clock, stream
        self.n, self.loss = 0, ""
        self.started = self.shown_at = clock()
        self.shown_n = 0

    def update(self, count: int) -> None:
        self.n += count
        if self.clock() - self.shown_at >= self.every:
            self._line()

    def set_postfix(self, loss: str, refresh: bool = False) -> None:
        self.loss = loss

    def close(self) -> None:
        if self.n > self.shown_n:
            self._line()

    def _line(self) -> None:
        now = self.clock()
        rate = (self.n - self.shown_n) / max(now - self.shown_at, 1e-9)
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        loss = f", loss {self.loss}" if self.loss else ""
        print(f"progress: {self.n:,}{f'/{self.total:,}' if self.total else ''} updates{share} after "
              f"{now - self.started:.0f} s, {rate:.1f} updates/s{loss}", file=self.stream or sys.stderr, flush=True)
        self.shown_at, self.shown_n = now, self.n


class MetricsLog:
    """The parent's view of training progress; only the parent writes logs."""

    def __init__(self, run_dir: str | None, workers: int, total: int | None, progress: bool = True,
                 tensorboard: bool = True, initial: dict[str, np.ndarray] | None = None):
        self.workers, self.start = workers, time.time()
        # Whole records only: a torn last line (crash, full disk) is cut off before appending; a failed write is
        # undone and raises WriteFailed naming the file.
        self.file = RecordLog(os.path.join(run_dir, "metrics.jsonl")) if run_dir else None
        self.writer = None
        if run_dir and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(log_dir=os.path.join(run_dir, "tensorboard"))
            except ImportError:  # tensorboard not installed: JSON lines only
                self.writer = None
        # a terminal gets tqdm's bar; a log file (stderr redirected) plain lines now and then, not every redraw
        self.bar = tqdm(total=total, unit="upd", dynamic_ncols=True, disable=not progress) \
            if not progress or _is_terminal(sys.stderr) else PlainProgress(total)
        self.previous = initial  # counters at the previous record (rates are per interval)
        self.previous_time = self.start
        self.shown = int(initial["ints"][:, UPDATES].sum()) if initial else 0
        self.bar.update(self.shown)
        self.last_loss: float | None = None
        if self.file is not None and self.file.repaired:  # a record torn by a crash or a full disk was cut off
            self.event("repaired", path=self.file.path, dropped_bytes=self.file.repaired)
        if self.shown:  # a resumed run: where this segment starts (what a killed segment logged past it was lost)
            self.event("resume", updates=self.shown)

    def progress(self, snapshot: dict[str, np.ndarray]) -> int:
        """Advance the progress bar; returns the global update count."""
        updates = int(snapshot["ints"][:, UPDATES].sum())
        if updates > self.shown:
            self.bar.update(updates - self.shown)
            self.shown = updates
        return updates

    def record(self, snapshot: dict[str, np.ndarray], epoch: int | None = None) -> dict[str, Any]:
        """One 'train' record over the interval since the previous one: rates, loss, staleness, skips."""
        now = time.time()
        ints, floats = snapshot["ints"], snapshot["floats"]
        before_ints = self.previous["ints"] if self.previous else np.zeros_like(ints)
        before_floats = self.previous["floats"] if self.previous else None
        seconds = max(now - self.previous_time, 1e-9)
        per_worker = []
        for w in range(self.workers):
            per_worker.append({
                "updates": int(ints[w, UPDATES]),
                "updates_per_s": float(ints[w, UPDATES] - before_ints[w, UPDATES]) / seconds,
                "examples_per_s": float(ints[w, EXAMPLES] - before_ints[w, EXAMPLES]) / seconds,
                "loss": _mean_loss(floats[w], None if before_floats is None else before_floats[w]),
                "skipped": int(ints[w, SKIPPED]),
            })
        staleness_mean, histogram = staleness_summary(ints, snapshot["staleness"])
        record = {
            "kind": "train", "time": now, "elapsed": now - self.start, "epoch": epoch,
            "updates": int(ints[:, UPDATES].sum()),
            "updates_per_s": sum(w["updates_per_s"] for w in per_worker),
            "examples_per_s": sum(w["examples_per_s"] for w in per_worker),
            "loss": _mean_loss(floats, before_floats),
            "lr": float(floats[:, LAST_LR].max()),
            "skipped": int(ints[:, SKIPPED].sum()),
            "staleness_mean": staleness_mean,
            "staleness_histogram": histogram,
            "phase_ms": phase_milliseconds(ints, floats, before_ints, before_floats),
            "workers": per_worker,
        }
        if record["loss"] is not None:
            self.last_loss = record["loss"]
            self.bar.set_postfix(loss=f"{record['loss']:.4g}", refresh=False)
        self.previous, self.previous_time = snapshot, now
        self._write(record)
        if self.writer is not None:
            step = record["updates"]
            for key in ("loss", "updates_per_s", "examples_per_s", "lr", "staleness_mean", "skipped"):
                if record[key] is not None:
                    self.writer.add_scalar(f"train/{key}", record[key], step)
        return record

    def evaluation(self, updates: int, metrics: dict[str, float], final: bool = False) -> dict[str, Any]:
        record = {"kind": "final_eval" if final else "eval", "time": time.time(),
                  "elapsed": time.time() - self.start, "updates": updates, "metrics": metrics}
        self._write(record)
        not_a_number = [key for key, value in metrics.items() if isinstance(value, float) and math.isnan(value)]
        if not_a_number:  # the run goes on; such an evaluation never becomes best.pt (Evaluator._improves)
            self.event("nan_metrics", updates=updates, metrics=not_a_number, final=final)
            self.note(f"warning: evaluate() returned NaN for {', '.join(not_a_number)} at update {updates}: not "
                      f"a candidate for best.pt (the best finite value is kept); training goes on")
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(f"eval/{key}", value, updates)
        return record

    def note(self, message: str) -> None:
        """A line for the user on stderr (e.g. start-up progress), printed above the progress bar."""
        tqdm.write(message, file=sys.stderr)
        sys.stderr.flush()

    def event(self, kind: str, **fields: Any) -> None:
        """A one-off record: stop reason, failure, checkpoint written."""
        self._write({"kind": kind, "time": time.time(), "elapsed": time.time() - self.start, **fields})

    def _write(self, record: dict[str, Any]) -> None:
        if self.file is not None:
            self.file.append(record)

    def close(self) -> None:
        self.bar.close()
        if self.file is not None:
            self.file.close()
        if self.writer is not None:
            self.writer.close()
