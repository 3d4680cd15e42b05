"""How bench_gpu.py times a run: the engine's loss function stamps each batch's start (StampedLoss), the plain loop's
steps are marked where the device runs them (StepSpans: CUDA events, which a loop that never waits for the device
needs), then the steady window of the stamps (updates/s and tokens/s), the GPU's utilisation (NVML samples) or the
steps' spans, and TF32 matrix products on demand.

Usage: `stamps = torch.zeros(n, dtype=torch.float64).share_memory_(); loss_fn = StampedLoss(nmt_loss, stamps)`;
after training `rate, start, end = steady_window(stamps)`; `steady_tokens(stamps, tokens)` (tokens per batch)
"""
from __future__ import annotations

import statistics
import threading
import time
from contextlib import contextmanager

import torch


class StampedLoss:
    """loss_fn(model, batch) stamping time.perf_counter() (system-wide) into a shared slot per batch; with tf32,
    first turns on TF32 matrix products in the process that calls it (an engine worker)."""

    def __init__(self, loss_fn, stamps: torch.Tensor, tf32: bool = False):
        self.loss_fn, self.stamps, self.tf32 = loss_fn, stamps, tf32  # stamps: (N,) float64, shared

    def __call__(self, model, batch: dict):
        if self.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
        self._stamp(batch["index"])
        return self.loss_fn(model, {k: v for k, v in batch.items() if k != "index"})

    @torch.compiler.disable
    def _stamp(self, index: int) -> None:
        """Runs eagerly under a compiled step (Config.compile): one graph break, no recompilation per index."""
        self.stamps[index] = time.perf_counter()


def steady_window(stamps: torch.Tensor) -> tuple[float, float, float]:
    """(updates/s, start, end) over the middle 80% of the stamped updates (unstamped slots are 0)."""
    times = stamps[stamps > 0].sort().values
    if len(times) < 2:
        raise ValueError(f"{len(times)} of {len(stamps)} batches were stamped: no steady window to time")
    first, last = int(0.1 * len(times)), max(int(0.9 * len(times)) - 1, 1)
    start, end = float(times[first]), float(times[last])
    return (last - first) / max(end - start, 1e-9), start, end


def steady_tokens(stamps: torch.Tensor, tokens: list[int]) -> float:
    """Tokens per second over steady_window's window: the tokens of the batches stamped inside it (tokens[i]: batch
    i's), over its length."""
    stamped = (stamps > 0).nonzero().squeeze(1)
    order = stamped[stamps[stamped].argsort()]  # batch indices in the order they ran
    _, start, end = steady_window(stamps)
    first, last = int(0.1 * len(order)), max(int(0.9 * len(order)) - 1, 1)
    return sum(tokens[i] for i in order[first:last].tolist()) / max(end - start, 1e-9)


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


@contextmanager
def tf32_matmuls(on: bool):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on or before
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def sampler_for(device: torch.device, nvml: bool):
    return UtilisationSampler(device).sampling() if nvml else _no_sampler()


@contextmanager
def _no_sampler():
    yield None
