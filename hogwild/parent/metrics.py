"""Training metrics, computed in the parent from the workers' shared counters.

Per worker and in total: updates/s, examples (or tokens)/s, mean training loss, skipped updates; staleness (shared
updates that landed between a worker's read of the parameters and its write) as mean and histogram; with graphed
workers, the eager steps and their share of those workers' steps so far (`eager_share`). Written as
JSON lines to `<run dir>/metrics.jsonl`, as TensorBoard events when tensorboard is installed, and shown on a tqdm
progress bar (on a terminal; when stderr is a file, as a plain `progress:` line every PLAIN_PROGRESS_SECONDS).
Records are appended whole (hogwild.files.RecordLog): never half a line, even on a full disk. A record's rates are
over the interval since the previous record, a progress line's since the previous line; the first interval starts
when training starts (`training_started`: every worker ready), so start-up is never counted as training time.

Serves steps 4 and 5 of `hogwild.train` (supervise, result).

Usage: `log = MetricsLog(run_dir, workers=2, total=1000); log.progress(snapshot); log.record(snapshot); log.close()`
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable

from tqdm.auto import tqdm

from ..files import RecordLog
from ..share.run_state import CounterSnapshot

PLAIN_PROGRESS_SECONDS = 30.0  # a progress line in a log file this often: 20 lines in a 10-minute run


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

    def restart_clock(self) -> None:
        """Training starts now: the time shown and the next rate count from here."""
        self.started = self.shown_at = self.clock()
        self.shown_n = self.n

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
              f"{now - self.started:.0f} s of training, {rate:.1f} updates/s since the previous line{loss}",
              file=self.stream or sys.stderr, flush=True)
        self.shown_at, self.shown_n = now, self.n


def eager_share(snapshot: CounterSnapshot, graphed: list[int]) -> float | None:
    """The share of the graphed workers' steps (applied or skipped) that ran the eager step: a batch shape without a
    graph, or every step of a worker whose capture failed (Config.graphs 'auto'). None without graphed workers."""
    if not graphed:
        return None
    steps = sum(snapshot.updates(w) + snapshot.skipped(w) for w in graphed)
    return min(1.0, snapshot.eager_steps() / steps) if steps else 0.0


class MetricsLog:
    """The parent's view of training progress; only the parent writes logs. graphed: the workers that run the
    graphed step (Config.graphed), whose eager share each train record gives."""

    def __init__(self, run_dir: str | None, workers: int, total: int | None, progress: bool = True,
                 tensorboard: bool = True, initial: CounterSnapshot | None = None, graphed: list[int] = ()):
        self.workers, self.start, self.graphed = workers, time.time(), list(graphed)
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
        self.shown = initial.updates() if initial is not None else 0
        self.bar.update(self.shown)
        self.last_loss: float | None = None
        self.extra: Callable[[], dict | None] | None = None  # fields for every 'train' record (an agent's report)
        if self.file is not None and self.file.repaired:  # a record torn by a crash or a full disk was cut off
            self.event("repaired", path=self.file.path, dropped_bytes=self.file.repaired)
        if self.shown:  # a resumed run: where this segment starts (what a killed segment logged past it was lost)
            self.event("resume", updates=self.shown)

    def training_started(self, at: float) -> None:
        """Every worker is ready (at: time.time()): the first record's rates, and the progress bar's, start here."""
        self.previous_time = at
        if isinstance(self.bar, PlainProgress):
            self.bar.restart_clock()
        elif not self.bar.disable:  # tqdm: its elapsed time and its first rate sample start here
            self.bar.start_t = self.bar.last_print_t = self.bar._time()
            self.bar.last_print_n = self.bar.n

    def progress(self, snapshot: CounterSnapshot) -> int:
        """Advance the progress bar; returns the global update count."""
        updates = snapshot.updates()
        if updates > self.shown:
            self.bar.update(updates - self.shown)
            self.shown = updates
        return updates

    def record(self, snapshot: CounterSnapshot, epoch: int | None = None) -> dict[str, Any]:
        """One 'train' record over the interval since the previous one: rates, loss, staleness, skips."""
        now = time.time()
        before = self.previous
        seconds = max(now - self.previous_time, 1e-9)
        per_worker = []
        for w in range(self.workers):
            before_updates, before_examples = (before.updates(w), before.examples(w)) if before is not None else (0, 0)
            per_worker.append({
                "updates": snapshot.updates(w),
                "updates_per_s": float(snapshot.updates(w) - before_updates) / seconds,
                "examples_per_s": float(snapshot.examples(w) - before_examples) / seconds,
                "loss": snapshot.mean_loss(before, w),
                "skipped": snapshot.skipped(w),
            })
        staleness_mean, histogram = snapshot.staleness_summary()
        record = {
            "kind": "train", "time": now, "elapsed": now - self.start, "epoch": epoch,
            "updates": snapshot.updates(),
            "updates_per_s": sum(w["updates_per_s"] for w in per_worker),
            "examples_per_s": sum(w["examples_per_s"] for w in per_worker),
            "loss": snapshot.mean_loss(before),
            "lr": snapshot.last_lr(),
            "skipped": snapshot.skipped(),
            "staleness_mean": staleness_mean,
            "staleness_histogram": histogram,
            "phase_ms": snapshot.phase_milliseconds(before),
            "workers": per_worker,
        }
        if self.graphed:  # since the run's start: rare shapes come and go
            record.update(eager_steps=snapshot.eager_steps(), eager_share=eager_share(snapshot, self.graphed))
        record.update((self.extra and self.extra()) or {})
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
