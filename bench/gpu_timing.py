"""How bench_gpu.py times a run over its steady window, the middle 80% of its updates (start-up, capture and the
join excluded alike):
  - the plain loop's steps are marked where the device runs them (StepSpans: CUDA events, which a loop that never
    waits for the device needs): `steady_window` of their starts, `steady_tokens`;
  - an engine run is timed by its workers' own update counters, which each worker bumps as an update lands, read by
    the parent every tick (0.1 s) into the run's metrics records (TrainResult.records with Config.log_every=1): the
    same for an eager and a graphed worker step, which never calls a Python hook per update (`steady_records`,
    with the workers' per-update phase times over the same window);
  - the GPU's utilisation over the same window (NVML samples), or the steps' spans.

Usage: `rate, start, end = steady_window(spans.starts())`; `steady_tokens(starts, tokens)` (tokens per batch);
`window = steady_records(result.records[:-1], result.updates)`
"""
from __future__ import annotations

import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch


def _middle(count: int) -> tuple[int, int]:
    """(first, last) step of the steady window of `count` steps: steps first..last-1 are timed, start to start."""
    return int(0.1 * count), max(min(int(0.9 * count), count - 1), 1)


def steady_window(stamps: torch.Tensor) -> tuple[float, float, float]:
    """(updates/s, start, end) over the middle 80% of the stamped steps' starts (unstamped slots are 0): from the
    start of step 10% to the start of step 90%, so 750 steps time 600."""
    times = stamps[stamps > 0].sort().values
    if len(times) < 2:
        raise ValueError(f"{len(times)} of {len(stamps)} batches were stamped: no steady window to time")
    first, last = _middle(len(times))
    start, end = float(times[first]), float(times[last])
    return (last - first) / max(end - start, 1e-9), start, end


def steady_tokens(stamps: torch.Tensor, tokens: list[int]) -> float:
    """Tokens per second over steady_window's window: the tokens of the steps timed in it (tokens[i]: batch i's),
    over its length."""
    stamped = (stamps > 0).nonzero().squeeze(1)
    order = stamped[stamps[stamped].argsort()]  # batch indices in the order they ran
    _, start, end = steady_window(stamps)
    first, last = _middle(len(order))
    return sum(tokens[i] for i in order[first:last].tolist()) / max(end - start, 1e-9)


@dataclass
class Window:
    """An engine run's steady window, from its metrics records."""

    rate: float  # updates/s
    tokens_rate: float  # examples (tokens, as the loss counts them) per second
    start: float  # time.time() of its first record
    end: float  # ... and of its last
    updates: int  # updates that landed inside it
    phase_ms: dict[str, float]  # the workers' mean ms per update landed inside it: pull, compute, push, update


def steady_records(records: list[dict], total: int) -> Window | None:
    """The steady window of an engine run of `total` updates from its tick records (each: time, the updates landed
    so far, the interval's examples/s and phase ms per update): from the last record at or below 10% of the updates
    to the first at or above 90%, so that 750 updates time at least 600. None when no two records span it (a run
    of a few ticks)."""
    ups = [r["updates"] for r in records]
    lo = max((i for i, u in enumerate(ups) if u <= 0.1 * total), default=0)
    hi = min((i for i, u in enumerate(ups) if u >= 0.9 * total), default=len(records) - 1)
    if hi <= lo or ups[hi] == ups[lo]:
        return None
    inside = range(lo + 1, hi + 1)
    times = [r["time"] for r in records]
    seconds, updates = times[hi] - times[lo], ups[hi] - ups[lo]
    tokens = sum(records[i]["examples_per_s"] * (times[i] - times[i - 1]) for i in inside)
    phases = {name: sum(records[i]["phase_ms"][name] * (ups[i] - ups[i - 1]) for i in inside) / updates
              for name in records[hi]["phase_ms"]}
    return Window(updates / seconds, tokens / seconds, times[lo], times[hi], updates, phases)


class UtilisationSampler:
    """Samples torch.cuda.utilization(device) (NVML) every 50 ms on a thread; usable when pynvml is installed."""

    def __init__(self, device: torch.device):
        self.device, self.samples, self.running = device, [], False
        self.thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def available(device: torch.device) -> bool:
        if device.type != "cuda":
            return False
        try:
            torch.cuda.utilization(device)
            return True
        except Exception:  # noqa: BLE001 - no pynvml / NVML: fall back to CUDA-event spans
            return False

    def _sample(self) -> None:
        while self.running:
            self.samples.append((time.perf_counter(), torch.cuda.utilization(self.device)))
            time.sleep(0.05)

    @contextmanager
    def sampling(self):
        self.running = True
        self.thread.start()
        try:
            yield self
        finally:
            self.running = False
            self.thread.join()

    def mean(self, start: float, end: float) -> float | None:
        inside = [u for t, u in self.samples if start <= t <= end]
        return statistics.fmean(inside) if inside else None


class StepSpans:
    """Each plain step's span, from before its batch copy to after its optimizer step: CUDA events on a GPU (when
    the device ran it, read once at the end: no sync per step), time.perf_counter on the CPU. `starts()` gives the
    steps' starts on time.perf_counter's clock (a GPU's events placed on it from an event recorded when the device
    was idle), the stamps steady_window reads."""

    def __init__(self, device: torch.device):
        self.cuda, self.marks = device.type == "cuda", []
        if self.cuda:
            torch.cuda.synchronize(device)
            self.origin, self.origin_event = time.perf_counter(), self._mark()

    def _mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> None:
        self.marks.append(self._mark())

    def end(self) -> None:
        self.marks.append(self._mark())

    def seconds(self) -> list[float]:
        pairs = zip(self.marks[::2], self.marks[1::2])
        if self.cuda:
            torch.cuda.synchronize()
            return [start.elapsed_time(end) / 1000 for start, end in pairs]
        return [end - start for start, end in pairs]

    def starts(self) -> torch.Tensor:
        """(steps,) float64: each step's start in time.perf_counter seconds."""
        if not self.cuda:
            return torch.tensor(self.marks[::2], dtype=torch.float64)
        torch.cuda.synchronize()
        return torch.tensor([self.origin + self.origin_event.elapsed_time(mark) / 1000 for mark in self.marks[::2]],
                            dtype=torch.float64)


def sampler_for(device: torch.device, nvml: bool):
    return UtilisationSampler(device).sampling() if nvml else _no_sampler()


@contextmanager
def _no_sampler():
    yield None
