"""bench_gpu.py's results: one Measurement per run, the JSON file of every run (rewritten after each, so a run cut
short keeps what it measured), and the report of a task, which has these parts:
  - the table: updates/s (median, min-max), target tokens/s, the ratios to the eager plain loop and to the graphed
    plain loop of the same precision, the updates timed, non-finite steps, GPU %, graphs, eager steps and their
    share (of the graphed loop's steps, or the graphed workers', TrainResult.eager_share), and the engine's phases.
    An engine run whose workers did not run the graphed step they were asked for (some or all fell back to the
    eager step, or no shape was graphed) is its own row, named so ('engine (fell back to eager)'), never counted
    as the variant;
  - the ratios the issue's targets name;
  - the projection to 1..4 GPUs with one worker each (the overlapped worker's depth-2 pipeline, `cycle_ms`), beside
    the paper's Table 1.

Usage: `report(measured, overlap=True, repeats=2)`; `save(path, command, device_name, measured, not_measured)`
"""
from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

PAPER_HOURS = {1: 26.89, 2: 16.56, 3: 9.24, 4: 6.96}  # Table 1: hours per 90k updates on 1..4 GPUs
UPDATES_90K = 90_000
PIPELINE = "max(compute, (compute + push + update) / 2, update, pull): the depth-2 pipeline"
EAGER, GRAPHED = "plain", "plain-graphed"  # the reference rows of the ratios (GRAPHED + "-bf16" for bf16 rows)


@dataclasses.dataclass
class Measurement:
    """One run of one variant."""

    task: str
    variant: str
    workers: int
    rate: float  # updates/s over the steady middle 80%
    tokens_rate: float  # target tokens/s (NMT: target words + eos; POS: tagged words) over the same window
    precision: str  # 'fp32' (TF32 matrix products where the variant turns them on) | 'bf16' (autocast)
    nonfinite: int | None  # plain: steps whose loss/gradient norm was not finite; engine: skipped updates
    gpu: float | None  # utilisation in percent (see gpu_source)
    gpu_source: str  # 'nvml' | 'span'
    phase_ms: dict[str, float] | None = None  # engine: mean ms per update per worker, over the steady window
    graphs: int | None = None  # graphed loop or engine: shapes captured, all workers together (CPU: prepared)
    eager_steps: int | None = None  # ... steps whose shape had no graph, run eagerly
    prepare_s: float | None = None  # graphed plain loop: seconds to capture, before the timed steps
    updates: int = 0  # updates the run made
    window: int = 0  # updates timed: the steady window's
    timing: str = "stamps"  # 'stamps': each plain step's start; 'counters': the engine workers' update counters, per
    #                         tick; 'run clock': updates / the engine's training seconds (no window to time)
    step: str | None = None  # engine: 'graphed', 'eager', 'no shape graphed', 'fell back to eager', 'F of K fell back'
    #                          (gpu_engine.engine_step)
    eager_share: float | None = None  # steps run eagerly per step, of the graphed loop / the graphed workers

    @property
    def label(self) -> str:
        """The row's name: the variant, or what its workers ran instead."""
        return self.variant if self.step in (None, "graphed", "eager") else f"{self.variant} ({self.step})"



def save(path: str | None, command: str, device: str, measured: list[Measurement], missing: list[dict]) -> None:
    """Every run's fields, with its row's label and eager share, and the runs not measured with their reasons."""
    if path:
        runs = [{**dataclasses.asdict(m), "label": m.label} for m in measured]
        Path(path).write_text(json.dumps({"command": command, "device": device, "runs": runs,
                                          "not_measured": missing}, indent=1) + "\n")


def cycle_ms(pull: float, compute: float, push: float, update: float, overlap: bool, host: float = 0.0) -> float:
    """One worker's period in ms. Overlapped, the worker runs a pipeline two steps deep (hogwild/worker/worker.py):
    step k+1 is queued once update k-1 has landed, which needs step k-1's compute G, its copy-out C and the CPU update
    U, and the pull of step k+1 waits only for step k's start; so two steps take G + C + U + h (h: the host's enqueue)
    unless the device, the update or the pull alone takes longer: max(G, (G + C + U + h) / 2, U, P). Serial: the
    phases one after another, P + G + C + U."""
    if not overlap:
        return pull + compute + push + update
    return max(compute, (compute + push + update + host) / 2, update, pull)


def projection(engine: dict[int, dict[str, float]], overlap: bool) -> list[tuple[int, float, float]]:
    """(GPUs, cycle ms, hours per 90k updates) for 1..4 GPUs with one worker each; engine: workers -> phase ms. A
    worker's own phases are the lone worker's; its CPU update the one measured with that many workers on the host."""
    alone = engine[min(engine)]
    rows = []
    for gpus in range(1, 5):
        update = engine.get(gpus, engine[max(engine)])["update"]  # the host's update with `gpus` workers on it
        cycle = cycle_ms(alone["pull"], alone["compute"], alone["push"], update, overlap)
        rows.append((gpus, cycle, UPDATES_90K * cycle / gpus / 3.6e6))
    return rows


def summarise(runs: list[Measurement]) -> dict[tuple[str, int], dict]:
    """(label, workers) -> the median/min/max of updates/s, median tokens/s, runs, the smallest window, non-finite
    steps in all, mean GPU %, mean phase ms, the precision, the last run's graph and eager counts and the largest
    eager share."""
    out = {}
    for key in dict.fromkeys((m.label, m.workers) for m in runs):
        same = [m for m in runs if (m.label, m.workers) == key]
        rates = [m.rate for m in same]
        gpus = [m.gpu for m in same if m.gpu is not None]
        phases = [m.phase_ms for m in same if m.phase_ms]
        out[key] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": len(same),
                    "tokens": statistics.median(m.tokens_rate for m in same), "precision": same[0].precision,
                    "nonfinite": sum(m.nonfinite or 0 for m in same), "gpu": statistics.fmean(gpus) if gpus else None,
                    "source": same[0].gpu_source, "graphs": same[-1].graphs, "eager": same[-1].eager_steps,
                    "share": max((m.eager_share for m in same if m.eager_share is not None), default=None),
                    "window": min(m.window for m in same), "timing": same[-1].timing,
                    "phase_ms": {k: statistics.fmean(p[k] for p in phases) for k in phases[0]} if phases else None}
    return out


def _reference(rows: dict, precision: str) -> float | None:
    """The graphed plain loop's median updates/s in that precision, when it was measured."""
    row = rows.get((GRAPHED + ("-bf16" if precision == "bf16" else ""), 1))
    return row["median"] if row else None


STEADY = 600  # updates a steady window should hold


def report(runs: list[Measurement], overlap: bool, repeats: int) -> None:
    """The task's table, its ratios and the projection to 1..4 GPUs beside the paper's Table 1."""
    rows = summarise(runs)
    eager = rows[(EAGER, 1)]["median"] if (EAGER, 1) in rows else None
    print(f"  {'variant':34} K  {'updates/s':>9} {'(min - max, runs)':27} {'tokens/s':>10}{'x plain':>10}"
          f"{'x graphed':>10} {'timed':>6}  {'non-finite':>10}  {'GPU %':10}  {'graphs/eager':>12} {'eager %':>7}  "
          f"{'pull':>6} {'compute':>7} {'push':>6} {'update':>6} (ms/update, per worker)")
    for (label, workers), row in rows.items():
        graphed = _reference(rows, row["precision"])
        ratios = "".join(f"{row['median'] / base:10.3f}" if base else f"{'-':>10}" for base in (eager, graphed))
        gpu = f"{row['gpu']:5.1f} {row['source']:4}" if row["gpu"] is not None else f"{'-':>5} {'-':4}"
        shapes = f"{row['graphs']}/{row['eager']}" if row["graphs"] is not None else "-"
        share = f"{100 * row['share']:7.1f}" if row["share"] is not None else f"{'-':>7}"
        ms = row["phase_ms"]
        phases = f"{ms['pull']:6.2f} {ms['compute']:7.2f} {ms['push']:6.2f} {ms['update']:6.2f}" if ms else ""
        clock = " (run clock)" if row["timing"] == "run clock" else ""
        spread = f"({row['min']:.2f} - {row['max']:.2f}, {row['runs']})"
        print(f"  {label:34} {workers}  {row['median']:9.2f} {spread:27} {row['tokens']:10.0f} {ratios} "
              f"{row['window']:6d}  {row['nonfinite']:10d}  {gpu}  {shapes:>12} {share}  {phases}{clock}")
    print(f"  (x plain: against the eager plain loop; x graphed: against the graphed plain loop of the row's precision;"
          f" medians of up to {repeats} runs; timed: the updates of the steady window, the fewest of the runs, "
          f"{STEADY} or more for a steady rate; eager %: steps run eagerly per update)")
    engine = {k[1]: v for k, v in rows.items() if k[0] == "engine"}  # a fallen-back row is not the engine's
    for precision in ("fp32", "bf16"):
        graphed = _reference(rows, precision)
        ones = {k[0]: v for k, v in rows.items() if k[0].startswith("engine") and k[1] == 1
                and v["precision"] == precision}
        if graphed and ones:
            print(f"  one engine worker / graphed plain loop ({precision}): "
                  + ", ".join(f"{name} {row['median'] / graphed:.3f}" for name, row in ones.items()))
    if engine and all(v["phase_ms"] for v in engine.values()):
        cycle = PIPELINE if overlap else "pull + compute + push + update"
        print(f"  projection, one worker per GPU ({'overlapped' if overlap else 'serial'} update; cycle = {cycle}):")
        print("  GPUs  cycle ms  updates/s  hours per 90k  paper Table 1 (h)")
        for gpus, cycle, hours in projection({n: v["phase_ms"] for n, v in engine.items()}, overlap):
            note = "" if gpus in engine else f"   (update measured with {max(engine)} workers)"
            print(f"  {gpus}    {cycle:9.2f} {gpus * 1000 / cycle:10.2f} {hours:14.2f} {PAPER_HOURS[gpus]:14.2f}{note}")
