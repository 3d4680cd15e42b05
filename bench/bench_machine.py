"""How this machine's cores share memory: what an update costs when the memory it rewrites was written last by
another core, as 2 Hogwild workers' updates of the same parameters are, window by window over time.

Usage: `python -m bench.bench_machine --seconds 120 --window 5 --megabytes 4`

  alone  one process adds a gradient into its own buffer of --megabytes (the SGD update, param.add_(grad)), again
         and again: milliseconds per sweep, the median
  turns  two processes take turns adding into one shared buffer (each waits for the other's sweep to finish):
         every sweep finds the buffer last written by the other core. The median of each --window seconds
         is printed, so that a change of the machine's speed during the run shows as a step.

A steady machine gives level windows. On this project's 2-core VM, 'turns' moved between 0.10 and 0.16-0.18 ms
per 4 MB by itself, window by window, as 2 Hogwild workers' update phase moves between two levels (run.py's
metrics.jsonl, phase_ms 'update'). A probe before a run cannot say which level the run will get; bench/bench_latency.py
probes the distance between the cores beside the run, and its far level is the workers' slow one
(docs/benchmarks.md, "The two levels are the distance between the cores").
"""
from __future__ import annotations

import argparse
import queue
import shlex
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp


def sweep_ms(buffer: torch.Tensor, grad: torch.Tensor) -> float:
    began = time.perf_counter()
    buffer.add_(grad)
    return (time.perf_counter() - began) * 1000


def alone(elements: int, seconds: float) -> float:
    """Median milliseconds of one sweep over a private buffer."""
    buffer, grad = torch.zeros(elements), torch.ones(elements)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(sweep_ms(buffer, grad))
    return statistics.median(times)


def take_turns(me: int, buffer: torch.Tensor, turn: torch.Tensor, seconds: float, window: float, results) -> None:
    """Process `me` (0 or 1): sweep the shared buffer whenever turn is ours, until `seconds` have passed."""
    torch.set_num_threads(1)
    grad, flag = torch.ones_like(buffer), turn.numpy()  # 1.0: the buffer counts the sweeps (exact to 2**24)
    windows, current, sweeps = [], [], 0
    window_end = end = None  # the clock starts once both processes are up (process 0's first sweep is not counted)
    while True:
        while flag[0] % 2 != me and flag[0] >= 0:  # the other's turn (-1: it has finished)
            pass
        now = time.perf_counter()
        if flag[0] < 0 or (end is not None and now >= end):
            flag[0] = -1
            if current and now - (window_end - window) >= window / 2:  # the last window, if at least half full
                windows.append(statistics.median(current))
            break
        if end is None and flag[0] >= 1:
            window_end, end = now + window, now + seconds
        ms = sweep_ms(buffer, grad)
        flag[0] += 1
        if end is None:
            continue
        current.append(ms)
        sweeps += 1
        if time.perf_counter() >= window_end:
            windows.append(statistics.median(current))
            current, window_end = [], window_end + window
    results.put((me, sweeps, windows))


def turns(elements: int, seconds: float, window: float) -> tuple[dict[int, tuple[int, list[float]]], torch.Tensor]:
    """({process: (sweeps, each window's median milliseconds)}, the buffer) of two processes taking turns on one
    buffer. Every element of the buffer ends up equal to the number of sweeps made, the uncounted first one too."""
    ctx = mp.get_context("spawn")
    buffer, turn = torch.zeros(elements).share_memory_(), torch.zeros(1, dtype=torch.int64).share_memory_()
    results = ctx.Queue()
    processes = [ctx.Process(target=take_turns, args=(me, buffer, turn, seconds, window, results))
                 for me in (0, 1)]
    for process in processes:
        process.start()
    try:
        reports = [results.get(timeout=seconds + 120) for _ in processes]
    except queue.Empty:
        codes = [process.exitcode for process in processes]
        raise SystemExit(f"bench_machine: the two processes did not both report within {seconds + 120:g} s "
                         f"(exit codes {codes}; None: still running, then killed)") from None
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return {me: (sweeps, windows) for me, sweeps, windows in reports}, buffer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the two processes take turns")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per printed median")
    parser.add_argument("--megabytes", type=float, default=4.0,
                        help="buffer size (4: the POS tagger's dense parameters, ~3.8 MB)")
    args = parser.parse_args(argv)
    for name in ("seconds", "window", "megabytes"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.window > args.seconds:
        parser.error(f"--window ({args.window:g}) must not exceed --seconds ({args.seconds:g})")
    torch.set_num_threads(1)
    elements = max(1, int(args.megabytes * 2**20 / 4))  # float32
    solo = alone(elements, min(args.window, 5.0))
    found, buffer = turns(elements, args.seconds, args.window)
    sweeps, windows = found[0]
    print(f"alone: {solo:.3f} ms per sweep of {args.megabytes:g} MB")
    print(f"turns: {sweeps} and {found[1][0]} sweeps; process 0's median per {args.window:g}-s window, ms:")
    print("  " + " ".join(f"{ms:.3f}" for ms in windows))
    if windows:
        fastest = min(windows)
        slow = sum(ms > 1.5 * fastest for ms in windows)
        print(f"windows: fastest {fastest:.3f} ms ({fastest / solo:.2f}x alone), slowest {max(windows):.3f} ms "
              f"({max(windows) / fastest:.2f}x the fastest); {slow} of {len(windows)} above 1.5x the fastest")
    print("command:", shlex.join(["python", "-m", "bench.bench_machine", *(argv or sys.argv[1:])]))
    return {"alone_ms": solo, "sweeps": {me: found[me][0] for me in found}, "windows_ms": windows,
            "buffer": buffer}


if __name__ == "__main__":
    main()
