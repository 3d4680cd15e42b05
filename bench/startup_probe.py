"""Run run.py until every worker is ready, then write what the start-up cost as JSON and exit (bench_data's probe).

The probe wraps the parent's `ParentLoop.wait_until_ready`: when it returns (every worker has mapped the batches,
just before the first update), it records the seconds since `--since` (the launch time bench_data took before
starting this process), the CPU seconds of this process and all its descendants (live ones and the reaped ones, such
as a tokenization pool: /proc's utime + stime + cutime + cstime), the parent's peak resident memory (VmHWM) and the
bytes under $TMPDIR (the engine's batch store), writes them to `--report`, and ends the run there (os._exit: the
workers die with the parent; no training or evaluation follows).

`--repo DIR` runs another checkout's run.py (e.g. an older commit, to measure side by side).

Usage: `python bench/startup_probe.py --report out.json --since $(date +%s.%N) [--repo DIR] -- --task nmt ...`
(by path: spawned processes import the main module again, and another checkout's bench/ may come first on the path)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _stat_seconds(pid: int | str) -> float:
    """utime + stime + cutime + cstime of a process, in seconds (0 when it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children of each of its threads, recursively)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:  # it has exited meanwhile
            continue
        for task in tasks:
            try:
                children = [int(child) for child in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its descendants, including those already reaped."""
    return _stat_seconds(pid) + sum(_stat_seconds(child) for child in descendants(pid))


def status_bytes(pid: int | str, field: str) -> int:
    """A /proc/PID/status memory field (VmHWM, VmRSS, ...) in bytes; 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def folder_bytes(path: str | os.PathLike) -> int:
    """Bytes of the regular files under a folder."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def build_parser() -> argparse.ArgumentParser:
    """The probe's own flags; run.py's arguments pass through untouched after them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", required=True, help="JSON file written when every worker is ready")
    parser.add_argument("--since", type=float, required=True, help="launch time (time.time()) to count from")
    parser.add_argument("--repo", default=None, help="the checkout whose run.py runs (default: this one)")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="run.py's arguments, after --")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repo:
        sys.path.insert(0, str(Path(args.repo).resolve()))
    from hogwild.parent import parent_loop
    from hogwild.tasks import cli

    original = parent_loop.ParentLoop.wait_until_ready

    def timed(self):
        failure = original(self)
        record = {"ready_seconds": time.time() - args.since, "failure": failure,
                  "cpu_seconds": tree_cpu_seconds(os.getpid()), "parent_hwm_bytes": status_bytes("self", "VmHWM"),
                  "store_bytes": folder_bytes(os.environ.get("TMPDIR", "/tmp")),
                  "hogwild": parent_loop.__file__}
        Path(args.report).write_text(json.dumps(record) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if failure is None else 1)

    parent_loop.ParentLoop.wait_until_ready = timed
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    return cli.main(run_args)


if __name__ == "__main__":
    sys.exit(main())
