"""How far apart this machine's two cores are, probe by probe over time, optionally while a run trains: the round
trip of one cache line between the cores (bench/core_latency.c, compiled with the C compiler), and, given the run's
metrics.jsonl, its update and compute phases at each level the probes saw.

Usage: `python -m bench.bench_latency --seconds 60 --period 0.5`
       `python -m bench.bench_latency --period 0.3 --metrics runs/x/metrics.jsonl -- python run.py ... --out runs/x`

On a virtual machine the host decides where the guest's cores run; a core-to-core round trip that moves between
levels by itself says the two cores were moved nearer or further apart. Hogwild workers pay for it at every update:
each writes the weights the other reads. A probe counts as 'far' when its median round trip is over 1.5x the
machine's near level (the 10th percentile of all probes), and as 'disturbed' (a probe thread was not running,
not a level) over 10x. On this project's 2-core VM the near level was ~140 ns and the far ~410-460 ns, and 2
Hogwild workers' update took 0.42-0.48 ms near and 1.36-1.41 ms far (docs/benchmarks.md, "The two levels are the
distance between the cores").
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("core_latency.c")
FAR, DISTURBED = 1.5, 10.0  # multiples of the near level
PHASES = ("update", "compute")


def build(compiler: str, directory: str) -> str:
    """Compile core_latency.c into `directory`; the executable's path."""
    if shutil.which(compiler) is None:
        raise SystemExit(f"bench_latency: no C compiler {compiler!r} (set --cc or CC)")
    executable = os.path.join(directory, "core_latency")
    done = subprocess.run([compiler, "-O2", "-pthread", str(SOURCE), "-o", executable], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_latency: {compiler} could not build {SOURCE}:\n{done.stderr.strip()}")
    return executable


def run(command: list[str]) -> int:
    """Run the command in the foreground; its exit code."""
    try:
        return subprocess.run(command, check=False).returncode
    except OSError as error:
        raise SystemExit(f"bench_latency: cannot run the command {shlex.join(command)}: {error}") from None


def parse_probes(text: str) -> list[tuple[float, float]]:
    """(unix time, median ns per round trip) of each probe line core_latency printed."""
    return [(float(fields[0]), float(fields[1])) for fields in (line.split() for line in text.splitlines()) if fields]


def classify(latencies: list[float]) -> tuple[float, list[str]]:
    """(the near level, 'near' / 'far' / 'disturbed' for each probe)."""
    ordered = sorted(latencies)
    near = ordered[(len(ordered) - 1) // 10]
    return near, ["disturbed" if ns > DISTURBED * near else "far" if ns > FAR * near else "near" for ns in latencies]


def segments(times: list[float], labels: list[str]) -> list[tuple[str, float, float]]:
    """Runs of one level, disturbed probes skipped: (level, first probe's time, last probe's time)."""
    runs: list[tuple[str, float, float]] = []
    for time, label in zip(times, labels):
        if label == "disturbed":
            continue
        if runs and runs[-1][0] == label:
            runs[-1] = (label, runs[-1][1], time)
        else:
            runs.append((label, time, time))
    return runs


def by_level(probes: list[tuple[float, float]], labels: list[str], records: list[dict], within: float,
             skip_updates: int = 0) -> dict[str, list[dict]]:
    """metrics.jsonl's train records (those with phase times) grouped by the level of the probes within `within`
    seconds of each; a record with no such probe, or with probes of both levels, is left out."""
    grouped: dict[str, list[dict]] = {"near": [], "far": []}
    times = [time for time, _ in probes]  # in order: core_latency prints them as it goes
    for record in records:
        if record.get("kind") != "train" or "phase_ms" not in record or record["updates"] <= skip_updates:
            continue
        around = labels[bisect.bisect_left(times, record["time"] - within):
                        bisect.bisect_right(times, record["time"] + within)]
        seen = {label for label in around if label != "disturbed"}
        if len(seen) == 1:
            grouped[seen.pop()].append(record)
    return grouped


def report(probes: list[tuple[float, float]], records: list[dict] | None, within: float, skip_updates: int) -> dict:
    """Print the levels (and the run's phases at each) and return them."""
    if not probes:
        raise SystemExit("bench_latency: no probe finished (is the run shorter than one --period?)")
    near, labels = classify([ns for _, ns in probes])
    result: dict = {"near_ns": near, "probes": len(probes)}
    for level in ("near", "far", "disturbed"):
        values = [ns for (_, ns), label in zip(probes, labels) if label == level]
        result[level] = {"probes": len(values), "median_ns": statistics.median(values) if values else None}
        shown = f", median {result[level]['median_ns']:.0f} ns" if values else ""
        print(f"{level}: {len(values)} of {len(probes)} probes{shown}")
    runs = segments([t for t, _ in probes], labels)
    start = probes[0][0]
    print(f"level changes: {max(0, len(runs) - 1)}; " + ", ".join(
        f"{level} {first - start:.1f}-{last - start:.1f} s" for level, first, last in runs[:20])
        + (" ..." if len(runs) > 20 else ""))
    if records is not None:
        result["run"] = {}
        for level, chosen in by_level(probes, labels, records, within, skip_updates).items():
            if not chosen:
                print(f"run, {level}: no record")
                continue
            phases = {phase: statistics.median(r["phase_ms"][phase] for r in chosen) for phase in PHASES}
            rate = statistics.median(r["updates_per_s"] for r in chosen)
            result["run"][level] = {"records": len(chosen), "updates_per_s": rate, **phases}
            print(f"run, {level}: {len(chosen)} records; update {phases['update']:.2f} ms, compute "
                  f"{phases['compute']:.2f} ms, {rate:.0f} updates/s (medians)")
    return result


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    options = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to probe (without a command)")
    parser.add_argument("--period", type=float, default=0.5, help="seconds between probes")
    parser.add_argument("--rounds", type=int, default=2000, help="round trips per timed burst (5 bursts a probe)")
    parser.add_argument("--cpus", default="0,1", help="the two CPUs to probe, A,B")
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default: $CC or cc)")
    parser.add_argument("--metrics", help="the command's metrics.jsonl: its phases at each level")
    parser.add_argument("--skip-updates", type=int, default=2000, help="leave out the run's first records")
    parser.add_argument("--save", type=Path, help="also write the probes' lines here (unix time, median ns, "
                        "fastest ns, CLOCK_MONOTONIC time)")
    args = parser.parse_args(options)
    for name in ("seconds", "period", "rounds"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    cpus = args.cpus.split(",")
    if len(cpus) != 2 or not all(cpu.isdigit() for cpu in cpus) or cpus[0] == cpus[1]:
        parser.error(f"--cpus must be two different CPU numbers A,B, got {args.cpus!r}")
    if args.metrics and not command:
        parser.error("--metrics needs the command that writes it, after --")
    with tempfile.TemporaryDirectory() as directory:
        probe_seconds = 10**6 if command else args.seconds
        probe = subprocess.Popen([build(args.cc, directory), str(probe_seconds), str(round(args.period * 1000)),
                                  str(args.rounds), *cpus], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            code = run(command) if command else 0
        finally:
            if command:
                probe.terminate()
            out, err = probe.communicate()
    if args.save:  # before any failure is reported: the probes are kept either way
        args.save.write_text(out)
    if probe.returncode not in (0, -15):
        raise SystemExit(f"bench_latency: the probe failed (exit {probe.returncode}): {err.strip()}")
    if code != 0:
        raise SystemExit(f"bench_latency: the command exited with {code}: {shlex.join(command)}")
    records = None
    if args.metrics:
        try:
            records = [json.loads(line) for line in Path(args.metrics).read_text().splitlines() if line.strip()]
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"bench_latency: cannot read --metrics {args.metrics}: {error}") from None
    result = report(parse_probes(out), records, args.period, args.skip_updates)
    print("command:", shlex.join(["python", "-m", "bench.bench_latency", *argv]))
    return result


if __name__ == "__main__":
    main()
