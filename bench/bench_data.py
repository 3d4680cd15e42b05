"""Data pipeline at scale: run.py's NMT start-up on N copies of the Europarl fr-en subset, cold (fresh cache) and
warm (cached), with time, CPU and memory per million pairs.

Usage: flock /tmp/hogwild-heavy.lock nice -n 10 .venv/bin/python -m bench.bench_data --copies 1 5 10 \
           --workdir /path/with/room [--repo OTHER_CHECKOUT]
       python -m bench.bench_data --quick   (a 2,000-pair synthetic corpus, one cold start of one worker)

For each N it writes N copies of the 200k training pairs (the .xz files concatenated: one xz stream per copy, read
as one file) under --workdir, then runs `run.py --task nmt --train <copies>/train --src-lang fr --tgt-lang en
--workers W --steps 20` twice under bench/startup_probe.py: cold, with a fresh $HOGWILD_CACHE, and warm, from the
cache the cold run wrote. Each run stops when every worker is ready (just before the first update) and reports:
- ready: seconds from launching the process to every worker ready (wall time: other jobs on the machine change it);
- CPU: CPU seconds of the run's processes until then (the parent, the tokenization pool, the workers);
- parent peak: the parent's peak resident memory (VmHWM: anonymous memory plus the file pages it maps);
- all PSS: the peak, over samples every 0.2 s, of the summed proportional set size of the parent and its
  descendants (shared pages counted once);
- cache / store: bytes of the cache entry and of the batch store the engine wrote under $TMPDIR.
`--rounds K` measures every size and start K times, the sizes interleaved round by round, and reports the medians
(other jobs on the machine change wall times from one run to the next). With several sizes, the slope of each
figure per million pairs (a least-squares line over the sizes), the growth from the smallest size to the largest,
and the line's value at --extrapolate million pairs. Last, from the largest size's cache: the CPU time a worker
spends building one training batch (the workers build their own batches from the memory-mapped arrays), and the CPU
time a graphed GPU worker spends at start-up learning its batches' shapes (the length-bucketed batches run.py --gpus
trains on; graphs per shape, sparse-row buffers by the largest): by building every batch, as workers did before,
against asking the BatchSet, which reads them from its offsets (medians of --rounds, the two interleaved). `--repo DIR`
runs another checkout's run.py on the same corpora, for a side-by-side comparison with an older commit (its cache
format may differ: no batch timing then). `--keep` leaves the caches in --workdir, for `--runs warm` later
(which never removes them).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hogwild.data.batch_set import BatchSet
from hogwild.data.buckets import training_buckets
from hogwild.data.cache import ArrayCache
from hogwild.data.corpora import corpora_dir
from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
from hogwild.data.synthetic import synthetic_parallel
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options
from hogwild.worker.step_graph import shape_counts

from bench import command_line
from bench.startup_probe import descendants, folder_bytes

ROOT = Path(__file__).resolve().parents[1]
SUBSET_PAIRS = 200_000  # pairs in ../shared/corpora/europarl-fr-en/train
QUICK_PAIRS = 2_000
SAMPLE_SECONDS = 0.2
FIGURES = (("ready_seconds", "ready s", 1.0), ("cpu_seconds", "CPU s", 1.0),
           ("parent_hwm_bytes", "parent peak GiB", 2**30), ("all_pss_bytes", "all PSS GiB", 2**30),
           ("cache_bytes", "cache MiB", 2**20), ("store_bytes", "store MiB", 2**20))


def write_copies(folder: Path, copies: int, quick: bool) -> tuple[Path, int]:
    """(train prefix, pairs) of `copies` copies of the corpus under `folder` (kept between runs: written once)."""
    folder.mkdir(parents=True, exist_ok=True)
    if quick:
        pairs = synthetic_parallel(QUICK_PAIRS, seed=0)
        for lang, side in (("fr", 0), ("en", 1)):
            text = "".join(" ".join(pair[side]) + "\n" for pair in pairs)
            (folder / f"train.{lang}").write_text(text * copies)
        return folder / "train", QUICK_PAIRS * copies
    source = corpora_dir() / "europarl-fr-en"
    for lang in ("fr", "en"):
        target = folder / f"train.{lang}.xz"
        if not target.exists():
            part = target.with_suffix(".part")
            with open(part, "wb") as out:
                for _ in range(copies):
                    with open(source / f"train.{lang}.xz", "rb") as copy:
                        shutil.copyfileobj(copy, out)
            part.rename(target)
    return folder / "train", SUBSET_PAIRS * copies


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class TreeMemory:
    """Samples the summed PSS of a process and its descendants on a thread; `peak` is the largest sum seen."""

    def __init__(self, pid: int):
        self.pid, self.peak = pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, sum(pss_bytes(pid) for pid in [self.pid, *descendants(self.pid)]))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def probe(train: Path, cache: Path, scratch: Path, workers: int, repo: str | None) -> dict:
    """One run.py start-up under the probe (bench/startup_probe.py): its report plus the sampled PSS peak."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    report = scratch / "report.json"
    run_args = ["--task", "nmt", "--train", str(train), "--src-lang", "fr", "--tgt-lang", "en", "--workers",
                str(workers), "--steps", "20", "--out", str(scratch / "run"), "--no-progress"]
    tmp = scratch / "tmp"
    tmp.mkdir()
    env = dict(os.environ, HOGWILD_CACHE=str(cache), TMPDIR=str(tmp))
    # the probe runs as a script (by path, not -m bench...): with --repo another checkout's bench/ comes first on the
    # path, and spawned processes (the tokenization pool, the workers) import the main module again
    command = [sys.executable, str(ROOT / "bench" / "startup_probe.py"), "--report", str(report), "--since",
               str(time.time())]
    process = subprocess.Popen(command + (["--repo", repo] if repo else []) + ["--", *run_args], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = TreeMemory(process.pid)
    output, _ = process.communicate()
    peak = memory.stop()
    if process.returncode != 0 or not report.exists():
        raise RuntimeError(f"run.py failed (status {process.returncode}):\n{output[-3000:]}")
    record = json.loads(report.read_text())
    record["all_pss_bytes"] = peak
    record["cache_bytes"] = folder_bytes(cache)
    shutil.rmtree(scratch, ignore_errors=True)
    return record


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of (x, y) points with at least two distinct x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y - slope * mean_x, slope


def batch_cpu_ms(train: Path, cache: Path, count: int = 500) -> float:
    """CPU milliseconds to build one training batch (B = 64) from the cached arrays, as a worker does."""
    dataset = load_nmt_dataset(NmtDataConfig(train=str(train), src_lang="fr", tgt_lang="en"), ArrayCache(cache))
    batches = BatchSet(dataset.train)
    start = time.process_time()
    for index in itertools.islice(range(len(batches)), count):
        batches[index]
    return (time.process_time() - start) * 1000 / min(count, len(batches))


def shape_cpu_seconds(train: Path, cache: Path, rounds: int) -> tuple[float, float, int, int]:
    """(CPU s building every batch to learn the shapes, CPU s asking the BatchSet, batches, shapes) for a graphed
    worker's batches from the cached arrays: medians of `rounds`, the two ways interleaved; both must agree."""
    dataset = load_nmt_dataset(NmtDataConfig(train=str(train), src_lang="fr", tgt_lang="en"), ArrayCache(cache))
    batches = BatchSet(dataset.train.with_buckets(training_buckets("nmt", True, NmtDataConfig.max_len)))
    built, told = [], []
    for _ in range(rounds):
        start = time.process_time()
        scanned = shape_counts(iter(batches))  # an iterator cannot tell: every batch built, as before
        built.append(time.process_time() - start)
        start = time.process_time()
        counts = shape_counts(batches)
        told.append(time.process_time() - start)
        if scanned != counts:
            raise AssertionError("the BatchSet's shapes differ from its built batches'")
    return statistics.median(built), statistics.median(told), len(batches), len(counts)


def report(results: dict[tuple[int, str], dict], sizes: list[int], runs: tuple[str, ...], extrapolate: float) -> None:
    """The table of figures per size and run, then the slope per million pairs, the growth across sizes and the
    line's value at `extrapolate` million pairs."""
    header = "| pairs | start | " + " | ".join(name for _, name, _ in FIGURES) + " |"
    print(header)
    print("|" + "---:|" * (len(FIGURES) + 2))
    for pairs in sizes:
        for run in runs:
            row = results[(pairs, run)]
            print(f"| {pairs:,} | {run} | " + " | ".join(f"{row[key] / unit:.2f}" for key, _, unit in FIGURES) + " |")
    if len(sizes) < 2:
        return
    for run in runs:
        lines = {key: line([(p / 1e6, results[(p, run)][key] / unit) for p in sizes]) for key, _, unit in FIGURES}
        print(f"{run} slope per million pairs: " + ", ".join(f"{name} {lines[key][1]:+.3f}"
                                                             for key, name, _ in FIGURES))
        growth = ", ".join(f"{name} {results[(sizes[-1], run)][key] / max(results[(sizes[0], run)][key], 1e-9):.2f}x"
                           for key, name, _ in FIGURES)
        print(f"{run} {sizes[-1]:,} / {sizes[0]:,} pairs: {growth}")
        print(f"{run} at {extrapolate:g}M pairs (the line): " + ", ".join(
            f"{name} {lines[key][0] + lines[key][1] * extrapolate:.2f}" for key, name, _ in FIGURES))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    add_run_options(parser, only=("workers",))
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 5, 10],
                        help="corpus sizes, as copies of the 200k-pair subset (--quick: of 2,000 synthetic pairs)")
    parser.add_argument("--workdir", default=None, help="where the corpora and caches go (default: a temporary "
                        "folder, removed at the end); about 13 MB of corpus and 350 MB of cache per copy")
    parser.add_argument("--repo", default=None, help="run another checkout's run.py (e.g. an older commit)")
    parser.add_argument("--extrapolate", type=float, default=40.0, help="million pairs to extrapolate the lines to")
    parser.add_argument("--runs", nargs="+", choices=("cold", "warm"), default=["cold", "warm"],
                        help="which starts to measure (warm alone: from caches an earlier --keep run left)")
    parser.add_argument("--rounds", type=int, default=1, help="measure each size and start this many times, the "
                        "sizes interleaved, and report the medians")
    parser.add_argument("--keep", action="store_true", help="keep each size's cache in --workdir")
    parser.add_argument("--quick", action="store_true", help="a 2,000-pair synthetic corpus, one copy, a cold start "
                        "of one worker: checks the benchmark runs, measures nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    options, args = parse_run_options(parser, argv)
    print("command:", command_line())
    copies = [1] if args.quick else sorted(set(args.copies))
    runs = ("cold",) if args.quick else tuple(run for run in ("cold", "warm") if run in args.runs)
    workers = 1 if args.quick else options.workers
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, got {args.rounds}")
    if not args.quick and not (corpora_dir() / "europarl-fr-en").exists():
        print(f"skipped: {corpora_dir() / 'europarl-fr-en'} not found (set HOGWILD_CORPORA)")
        return 0
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-data-") as temporary:
        workdir = Path(args.workdir or temporary)
        samples: dict[tuple[int, str], list[dict]] = {}
        batch_ms = shapes = None
        for round_, count in itertools.product(range(args.rounds), copies):  # the sizes interleaved, round by round
            train, pairs = write_copies(workdir / f"corpus-x{count}{'-quick' if args.quick else ''}", count,
                                        args.quick)
            cache = workdir / f"cache-x{count}"
            if "cold" in runs:
                shutil.rmtree(cache, ignore_errors=True)
            elif not cache.is_dir():
                parser.error(f"--runs warm: no cache {cache}; measure a cold start with --keep first")
            for run in runs:
                record = probe(train, cache, workdir / "scratch", workers, args.repo)
                samples.setdefault((pairs, run), []).append(record)
                print(f"{pairs:,} pairs, {run}{f' (round {round_ + 1})' if args.rounds > 1 else ''}: " + ", ".join(
                    f"{name} {record[key] / unit:.2f}" for key, name, unit in FIGURES), flush=True)
            if not args.repo and round_ == args.rounds - 1 and count == copies[-1]:
                batch_ms = batch_cpu_ms(train, cache)
                shapes = shape_cpu_seconds(train, cache, args.rounds)
            if "cold" in runs and not args.keep:  # a cache this run wrote (warm alone reads earlier ones: kept)
                shutil.rmtree(cache, ignore_errors=True)
        results = {key: {figure: statistics.median(record[figure] for record in records) for figure, _, _ in FIGURES}
                   for key, records in samples.items()}
        sizes = sorted({pairs for pairs, _ in results})
        first = samples[(sizes[0], runs[0])][0]
        print(f"run.py of {first['hogwild'].rsplit('/hogwild/', 1)[0]}, {workers} worker(s)"
              + (f", medians of {args.rounds} rounds" if args.rounds > 1 else ""))
        report(results, sizes, runs, args.extrapolate)
        if batch_ms is not None:
            print(f"a worker builds a training batch (B=64) from the {sizes[-1]:,}-pair cache in {batch_ms:.3f} ms "
                  f"of CPU")
        if shapes is not None:
            built, told, count, kinds = shapes
            print(f"a graphed worker learns the {kinds} shapes of its {count:,} batches from the {sizes[-1]:,}-pair "
                  f"cache in {told:.3f} s of CPU from the BatchSet's offsets, {built:.3f} s by building every batch "
                  f"(before): {built / max(told, 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
