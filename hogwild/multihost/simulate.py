"""Run an MPI job on simulated hosts on this machine: one rank per host, each host a network namespace with its own
hostname and address, the ranks talking over TCP through the hosts' links (optionally shaped to a rate); at the end,
what each link carried, checked against what each rank says it sent (a job whose bytes did not cross fails).

Usage (root; from the repository, in the venv with the [mpi] extra):
    python -m hogwild.multihost.simulate --hosts 3 --rate 100mbit -- \\
        python run.py --task pos --workers 1 --distributed easgd --servers 1 --steps 400

The simulation lives in .simulated_hosts (SimulatedHosts); this is its command line.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .exchange_stats import RankReport, read_reports
from .simulated_hosts import LinkBytes, SimulatedHosts, rate_bits

CROSSED = 0.5  # a rank's link must carry at least this share of the payload the rank says it sent


def check_crossed(reports: list[RankReport], carried: list[LinkBytes]) -> list[str]:
    """The ranks whose payload did not cross their host's link (hosts named host<i>, as the simulation names them):
    one line each; empty when every rank's link carried at least CROSSED of what it sent and received."""
    problems = []
    for report in reports:
        host = int(report.host[4:]) if report.host.startswith("host") and report.host[4:].isdigit() else None
        if host is None or host >= len(carried):
            problems.append(f"rank {report.rank} ran on {report.host!r}, not on a simulated host")
            continue
        link = carried[host]
        for what, payload, crossed in (("sent", report.bytes_sent, link.out_of),
                                       ("received", report.bytes_received, link.into)):
            if crossed < CROSSED * payload:
                problems.append(f"rank {report.rank} ({report.role} on {report.host}) {what} {payload:,} bytes but "
                                f"its link carried {crossed:,}: the bytes did not cross the network (MPI used shared "
                                f"memory? UCX_TLS=tcp,self is set by this tool)")
    return problems


def run_job(hosts: SimulatedHosts, command: list[str], mpiexec: str, ranks: int | None = None) -> tuple[int, str]:
    """Run `command` on the simulated hosts; its standard output is passed through and returned whole."""
    job = subprocess.Popen(hosts.mpiexec(command, mpiexec, ranks), stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in job.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
        return job.wait(), "".join(lines)
    finally:
        if job.poll() is None:  # interrupted: the launcher passes SIGTERM on to the ranks; what is left, remove() ends
            job.terminate()
            try:
                job.wait(10)
            except subprocess.TimeoutExpired:
                job.kill()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hogwild.multihost.simulate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=3, help="simulated hosts (default: 3)")
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks, one per host (default: --hosts)")
    parser.add_argument("--rate", default=None, help="each link's rate both ways, tc's units: 1gbit, 100mbit, "
                                                     "20mbit (default: unlimited)")
    parser.add_argument("--mpiexec", default=str(Path(sys.executable).parent / "mpiexec"),
                        help="MPICH's (hydra's) mpiexec (default: the one beside this Python)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs (after --)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give the command each rank runs after --")
    if args.hosts < 1 or (args.ranks is not None and not 1 <= args.ranks <= args.hosts):
        parser.error(f"--hosts must be >= 1 and --ranks between 1 and --hosts, got {args.hosts} and {args.ranks}")
    if args.rate is not None:
        try:
            rate_bits(args.rate)
        except ValueError as error:
            parser.error(f"--rate: {error}")
    if not os.path.exists(args.mpiexec):
        parser.error(f"--mpiexec {args.mpiexec}: not found (pip install '.[mpi]')")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the hosts are removed on the way out
    try:
        with SimulatedHosts(args.hosts, args.rate) as hosts:
            say(f"simulated hosts: {', '.join(f'host{i} {a}' for i, a in enumerate(hosts.addresses))} on bridge "
                f"{hosts.bridge}, links {args.rate or 'unlimited'}")
            before = [hosts.link_bytes(i) for i in range(args.hosts)]
            start = time.monotonic()
            code, output = run_job(hosts, command, args.mpiexec, args.ranks)
            carried = [hosts.link_bytes(i) - b for i, b in zip(range(args.hosts), before)]
    except OSError as error:
        say(f"simulate: {error}")
        return 1
    say(f"simulated hosts: the job exited {code} after {time.monotonic() - start:.1f} s; links carried "
        + ", ".join(f"host{i} {c.into / 1e6:.1f} MB in / {c.out_of / 1e6:.1f} MB out" for i, c in enumerate(carried)))
    reports = read_reports(output)
    if not reports:
        say("simulated hosts: no rank printed its exchange line (hogwild.distributed ... exchanged): the links' "
            "bytes were not checked against the ranks' payload")
        return code
    problems = check_crossed(reports, carried)
    for problem in problems:
        say(f"simulated hosts: {problem}")
    return code or (1 if problems else 0)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
