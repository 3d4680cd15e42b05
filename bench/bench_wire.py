"""Exchanges in 16 bits: are the bytes on the wire halved, and is the model as good at equal updates?

Usage (root: simulated hosts, as bench.bench_links):
    python -m bench.bench_wire [--algorithms easgd,allreduce] [--wires fp32,bf16] [--seeds 1,2] [--steps 400]
    python -m bench.bench_wire --quick      (easgd, fp32 and bf16, seed 1, 40 steps: a smoke test)

Each run is `run.py --task pos --workers 1 --distributed ALGO --steps N --seed S --wire W` on 3 simulated hosts over
unlimited links (bench.bench_links.run_one); every seed runs every wire format, one after the other. Per row:
  bytes/exch  what the training hosts' links carried (the kernel's counters, both directions) per exchange, the
              initial and final model (always fp32) included: median over the seeds
  ratio       that against fp32 with the same seed
  accuracy    the final model's held-out accuracy at the same number of updates: median, and min-max over the seeds
"""
from __future__ import annotations

import argparse
import json
import statistics

from bench.bench_links import bench_hosts, run_one
from hogwild.multihost.dist_config import ALGORITHMS, WIRE_FORMATS
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options


def table(rows: list[dict]) -> str:
    lines = [f"{'algorithm':9s} {'wire':4s} {'bytes/exch':>10s} {'ratio':>5s} {'accuracy (min-max over seeds)':>30s} "
             f"{'exit':>5s}"]
    for algorithm, wire in dict.fromkeys((r["algorithm"], r["wire"]) for r in rows):
        mine = [r for r in rows if (r["algorithm"], r["wire"]) == (algorithm, wire)]
        base = {r["seed"]: r for r in rows if (r["algorithm"], r["wire"]) == (algorithm, "fp32") and r["exit"] == 0}
        ok = [r for r in mine if r["exit"] == 0]
        ratios = [r["bytes_per_exchange"] / base[r["seed"]]["bytes_per_exchange"] for r in ok if r["seed"] in base]
        accuracy = [r["metric"] for r in ok]
        lines.append(f"{algorithm:9s} {wire:4s} "
                     f"{statistics.median(r['bytes_per_exchange'] for r in ok) if ok else float('nan'):10.0f} "
                     f"{statistics.median(ratios) if ratios else float('nan'):5.2f} "
                     + (f"{statistics.median(accuracy):.4f} ({min(accuracy):.4f}-{max(accuracy):.4f})"
                        if accuracy else "n/a").rjust(30)
                     + f" {','.join(str(r['exit']) for r in mine):>5s}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__ + "\nOf run.py's options it takes --steps (updates per training host; or --config FILE's).",
        formatter_class=HelpFormatter)
    add_run_options(parser, only=("steps",), defaults={"steps": 400})
    parser.add_argument("--algorithms", default="easgd,allreduce", help="comma-separated (default: %(default)s)")
    parser.add_argument("--wires", default="fp32,bf16", help="comma-separated, fp32 first (default: %(default)s)")
    parser.add_argument("--seeds", default="1,2", help="comma-separated run.py --seed values (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="easgd, fp32 and bf16, seed 1, 40 steps")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # run.py's --steps checked, then read from args
    if args.quick:
        args.algorithms, args.wires, args.seeds, args.steps = "easgd", "fp32,bf16", "1", 40
    algorithms, wires = args.algorithms.split(","), args.wires.split(",")
    if sorted(set(algorithms) - set(ALGORITHMS)) or sorted(set(wires) - set(WIRE_FORMATS)) or wires[0] != "fp32":
        parser.error(f"--algorithms from {', '.join(ALGORITHMS)}; --wires from {', '.join(WIRE_FORMATS)}, fp32 "
                     f"first (the reference); got {args.algorithms} and {args.wires}")
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: integers, got {args.seeds!r}")
    rows = []
    with bench_hosts(parser, "bench-wire-") as (hosts, scratch):
        for seed in seeds:
            for algorithm in algorithms:
                for wire in wires:
                    out = scratch / f"{algorithm}-{wire}-{seed}"
                    row = run_one(hosts, "pos", algorithm, "unlimited", args.steps, out,
                                  ["--seed", str(seed), "--wire", wire])
                    row.update(wire=wire, seed=seed)
                    rows.append(row)
                    print(f"seed {seed}: {json.dumps(row)}", flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
