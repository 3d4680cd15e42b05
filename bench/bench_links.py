"""Multi-host training over links of several rates: does a slow link slow the training, or only the exchanges?

Usage (root: the hosts are network namespaces, hogwild.multihost.simulated_hosts):
    python -m bench.bench_links [--models pos,nmt] [--algorithms easgd,...] [--rates unlimited,1gbit,100mbit,20mbit]
                                [--rounds 2] [--steps 400]
    python -m bench.bench_links --quick      (pos, easgd, unlimited and 100mbit, 40 steps, 1 round, 2 hosts: the
                                              server and 1 training host; a smoke test)

Each run is `run.py --task MODEL --workers 1 --distributed ALGO --steps N` on 3 simulated hosts (easgd, eamsgd,
downpour: 1 server + 2 training hosts; allreduce, adpsgd: 3 training hosts), every link shaped to the rate; rounds
interleave the rates (round r runs every rate once, one after the other). Per row (medians over the rounds):
  upd/s      each training host's local updates per second while its workers trained (from its metrics.jsonl,
             without start-up and the end), averaged over the hosts
  ratio      that against the unlimited link of the same round
  exch/s     exchanges per second of training, per host
  wire MB/s  bytes per second on the busiest link (the kernel's counters, both directions) over the run
  in-flight  how fast an exchange's bytes moved while it was in flight, as a share of the link's rate (the larger
             direction's payload over the exchange's seconds; per host: with a server, the hosts share its link)
  link busy  the busiest link's busier direction while the hosts trained, as a share of its rate (sampled)
  end s      the longest wait of a host for the final model after its workers stopped
  exit       run.py's exit status (0: the job finished)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

from bench import command_line
from hogwild.multihost.dist_config import ALGORITHMS, SERVER_ALGORITHMS
from hogwild.multihost.simulated_hosts import SimulatedHosts, rate_bits, unavailable
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options

REPO = Path(__file__).resolve().parent.parent
RATES = ("unlimited", "1gbit", "100mbit", "20mbit")
HOSTS = 3


def run_one(hosts: SimulatedHosts, model: str, algorithm: str, rate: str, steps: int, out: Path,
            extra: tuple[str, ...] = ()) -> dict:
    """One run.py job (with `extra` flags) over links at `rate`; its figures (see the module's docstring), plus the
    final held-out metric and the bytes the training hosts' links carried per exchange."""
    for host in range(hosts.count):
        hosts.set_rate(host, None if rate == "unlimited" else rate)
    before = [hosts.link_bytes(i) for i in range(hosts.count)]
    command = [sys.executable, "run.py", "--task", model, "--workers", "1", "--distributed", algorithm, "--steps",
               str(steps), "--eval-every", str(steps), "--log-every", str(max(1, steps // 20)), "--no-progress",
               "--out", str(out), *extra] + (["--servers", "1"] if algorithm in SERVER_ALGORITHMS else [])
    start = time.monotonic()
    with LinkSampler(hosts) as sampler:
        done = subprocess.run(hosts.mpiexec(command, str(Path(sys.executable).parent / "mpiexec")), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    seconds = time.monotonic() - start
    carried = [hosts.link_bytes(i) - b for i, b in zip(range(hosts.count), before)]
    row = {"model": model, "algorithm": algorithm, "rate": rate, "exit": done.returncode, "seconds": seconds,
           "wire_mb_per_s": max(c.into + c.out_of for c in carried) / seconds / 1e6}
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr, flush=True)
        return row
    summary = json.loads((out / "summary.json").read_text())
    figures = summary["exchange"]
    trained = [f for f in figures if f["role"] == "worker"]
    row["metric"] = summary["final_metrics"][summary["best"]["metric"]]
    links = [carried[int(f["host"][4:])] for f in trained]
    row["bytes_per_exchange"] = sum(c.into + c.out_of for c in links) / sum(f["exchanges"] for f in trained)
    rates = [local_rate(out / f"host{i}" / "metrics.jsonl") for i in range(len(trained))]
    row["updates_per_s"] = statistics.mean(r for r, _, _ in rates)
    row["exchanges_per_s"] = statistics.mean(f["exchanges"] / s for f, (_, s, _) in zip(trained, rates))
    window = (min(w[0] for _, _, w in rates), max(w[1] for _, _, w in rates))  # any host training
    row["link_busy"] = None if rate == "unlimited" else sampler.busiest(*window) * 8 / rate_bits(rate)
    row["end_seconds"] = max(f["wait_seconds"] for f in trained)
    in_flight = [f["in_flight_bytes_per_second"] for f in trained if f["in_flight_bytes_per_second"]]
    row["in_flight_share"] = (statistics.median(in_flight) * 8 / rate_bits(rate)
                              if in_flight and rate != "unlimited" else None)
    return row


def local_rate(metrics: Path) -> tuple[float, float, tuple[float, float]]:
    """(updates/s, seconds, (start, end) in time.time()) of one host's workers between its first and its last
    periodic 'train' record (the final record comes after the end of the exchanges, start-up before the first)."""
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    trained = [r for r in records if r["kind"] == "train"][:-1]
    if len(trained) < 2:
        raise RuntimeError(f"{metrics}: fewer than 2 periodic train records; use more --steps")
    seconds = trained[-1]["time"] - trained[0]["time"]
    return (trained[-1]["updates"] - trained[0]["updates"]) / seconds, seconds, (trained[0]["time"],
                                                                                 trained[-1]["time"])


class LinkSampler:
    """Every link's byte counters every 0.25 s on a thread, to tell how busy the links were while every host
    trained (the counters at the end alone also count the start-up and the end)."""

    def __init__(self, hosts: SimulatedHosts) -> None:
        self.hosts, self.samples, self.stop = hosts, [], threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "LinkSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def _sample(self) -> None:
        while True:
            self.samples.append((time.time(), [self.hosts.link_bytes(i) for i in range(self.hosts.count)]))
            if self.stop.wait(0.25):
                return

    def busiest(self, start: float, end: float) -> float:
        """Bytes per second between start and end in the busiest direction of the busiest link."""
        inside = [(t, links) for t, links in self.samples if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, first), (t1, last) = inside[0], inside[-1]
        return max(max(b.into - a.into, b.out_of - a.out_of) for a, b in zip(first, last)) / (t1 - t0)


def table(rows: list[dict]) -> str:
    """One line per (model, algorithm, rate): medians over the rounds; ratio against unlimited in the same round."""
    lines = [f"{'model':5s} {'algorithm':9s} {'rate':9s} {'upd/s':>6s} {'ratio':>5s} {'exch/s':>6s} "
             f"{'wire MB/s':>9s} {'in-flight':>9s} {'link busy':>9s} {'end s':>6s} {'exit':>4s}"]
    keys = list(dict.fromkeys((r["model"], r["algorithm"], r["rate"]) for r in rows))
    for model, algorithm, rate in keys:
        mine = [r for r in rows if (r["model"], r["algorithm"], r["rate"]) == (model, algorithm, rate)]
        base = [r for r in rows if (r["model"], r["algorithm"], r["rate"]) == (model, algorithm, "unlimited")]
        ok = [r for r in mine if r["exit"] == 0]
        ratios = [r["updates_per_s"] / b["updates_per_s"] for r, b in zip(mine, base)
                  if r["exit"] == 0 and b["exit"] == 0]

        def median(key: str, form: str, width: int) -> str:
            values = [r[key] for r in ok if r.get(key) is not None]
            return f"{statistics.median(values):{width}{form}}" if values else f"{'n/a':>{width}s}"

        def percent(key: str) -> str:
            values = [r[key] for r in ok if r.get(key) is not None]
            return f"{f'{statistics.median(values):.0%}' if values else 'n/a':>9s}"

        lines.append(f"{model:5s} {algorithm:9s} {rate:9s} {median('updates_per_s', '.2f', 6)} "
                     f"{statistics.median(ratios) if ratios else float('nan'):5.2f} "
                     f"{median('exchanges_per_s', '.2f', 6)} {median('wire_mb_per_s', '.2f', 9)} "
                     f"{percent('in_flight_share')} {percent('link_busy')} {median('end_seconds', '.1f', 6)} "
                     f"{','.join(str(r['exit']) for r in mine):>4s}")
    return "\n".join(lines)


@contextlib.contextmanager
def bench_hosts(parser: argparse.ArgumentParser, prefix: str, count: int = HOSTS
                ) -> Iterator[tuple[SimulatedHosts, Path]]:
    """A bench's `count` simulated hosts and scratch folder (a usage error where hosts cannot be simulated), its
    command printed; SIGTERM ends it as Ctrl-C does, the hosts removed on the way out."""
    reason = unavailable()
    if reason:
        parser.error(f"cannot simulate hosts here: {reason}")
    print("command:", command_line(), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with SimulatedHosts(count) as hosts, tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield hosts, Path(scratch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__ + "\nOf run.py's options it takes --steps (updates per training host; or --config FILE's).",
        formatter_class=HelpFormatter)
    add_run_options(parser, only=("steps",), defaults={"steps": 400})
    parser.add_argument("--models", default="pos", help="comma-separated: pos, nmt (default: pos)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated (default: all)")
    parser.add_argument("--rates", default=",".join(RATES), help="comma-separated tc rates; 'unlimited' first, it "
                                                                 "is the reference (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions (default: 2)")
    parser.add_argument("--quick", action="store_true", help="pos, easgd, unlimited,100mbit, 40 steps, 1 round, "
                        "2 hosts (the server and 1 training host)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # run.py's --steps checked, then read from args
    if args.quick:
        args.models, args.algorithms, args.rates, args.steps, args.rounds = "pos", "easgd", "unlimited,100mbit", 40, 1
    models, algorithms, rates = args.models.split(","), args.algorithms.split(","), args.rates.split(",")
    if sorted(set(models) - {"pos", "nmt"}) or sorted(set(algorithms) - set(ALGORITHMS)):
        parser.error(f"--models: pos, nmt; --algorithms: {', '.join(ALGORITHMS)}; got {args.models} and "
                     f"{args.algorithms}")
    if rates[0] != "unlimited":
        parser.error("--rates: the first must be 'unlimited' (the reference of every ratio)")
    try:
        for rate in rates[1:]:
            rate_bits(rate)
    except ValueError as error:
        parser.error(f"--rates: {error}")
    rows = []
    with bench_hosts(parser, "bench-links-", 2 if args.quick else HOSTS) as (hosts, scratch):
        for round_ in range(args.rounds):
            for model in models:
                for algorithm in algorithms:
                    for rate in rates:
                        out = scratch / f"{model}-{algorithm}-{rate}-{round_}"
                        row = run_one(hosts, model, algorithm, rate, args.steps, out)
                        rows.append(row)
                        print(f"round {round_}: {json.dumps(row)}", flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
