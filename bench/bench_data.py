"""Data pipeline speed: Europarl fr-en 200k load time, first (Moses tokenization) and cached, and batcher throughput.

Usage: flock /tmp/hogwild-heavy.lock .venv/bin/python -m bench.bench_data [--train-limit N] [--processes P]
       python -m bench.bench_data --quick   (seeded synthetic corpora of 2,000 sentences: seconds, no corpus needed)

Prints the command line, the first and the cached load time of the Europarl task (train 200k + dev 3k, max_len 50,
15k vocabularies) and their ratio, then the tokens/s of the NMT batcher (batch 64, bucketed) and of the POS batcher
(Brown, one sentence per batch, the paper's setting) over a fixed number of batches. The first load uses a fresh,
temporary cache folder, so it always includes reading, tokenizing and tensorizing.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from hogwild.data.cache import ArrayCache
from hogwild.data.corpora import corpora_dir
from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
from hogwild.data.pos_dataset import PosDataConfig, load_pos_dataset
from hogwild.data.moses import default_processes
from hogwild.data.synthetic import synthetic_parallel, synthetic_tagged
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options

from bench import command_line


def batcher_speed(batcher, max_batches: int, count) -> tuple[float, int, float]:
    """(tokens/s, batches, seconds) to build the first ``max_batches`` batches."""
    tokens = batches = 0
    start = time.perf_counter()
    for batch in batcher:
        tokens += count(batch)
        batches += 1
        if batches >= max_batches:
            break
    seconds = time.perf_counter() - start
    return tokens / seconds, batches, seconds


def write_synthetic(root: Path, sentences: int = 2000) -> tuple[Path, Path, Path]:
    """--quick: seeded synthetic corpora written as the real loaders read them: (train prefix, dev prefix, a
    slash-tagged file); the parallel one has `sentences` training pairs and a tenth of that for dev."""
    pairs = synthetic_parallel(sentences + sentences // 10, seed=0)
    for part, chunk in (("train", pairs[:sentences]), ("dev", pairs[sentences:])):
        for lang, side in (("fr", 0), ("en", 1)):
            (root / f"{part}.{lang}").write_text("".join(" ".join(pair[side]) + "\n" for pair in chunk))
    tagged = root / "tagged.txt"
    tagged.write_text("".join(" ".join(f"{w}/{t}" for w, t in s) + "\n" for s in synthetic_tagged(sentences)))
    return root / "train", root / "dev", tagged


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] + "\n\nOf run.py's options it takes "
                                     "--train-limit (or --config FILE's).", formatter_class=HelpFormatter)
    add_run_options(parser, only=("train_limit",))
    parser.add_argument("--processes", type=int, default=0, help="tokenization processes (0: all CPUs)")
    parser.add_argument("--batches", type=int, default=2000, help="batches timed per batcher")
    parser.add_argument("--quick", action="store_true", help="synthetic corpora of 2,000 sentences instead of "
                        "Europarl and Brown: seconds (CI), measures the same steps on little data")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # the run option's value is checked, then read from args
    print("command:", command_line())
    with tempfile.TemporaryDirectory(prefix="hogwild-bench-data-") as scratch:
        europarl, name = corpora_dir() / "europarl-fr-en", "synthetic" if args.quick else "europarl fr-en"
        train, dev, brown = write_synthetic(Path(scratch)) if args.quick else (
            europarl / "train", europarl / "dev", corpora_dir() / "brown")
        if not train.parent.exists():
            print(f"skipped: {train.parent} not found (set HOGWILD_CORPORA)")
            return 0
        config = NmtDataConfig(train=str(train), dev=str(dev), train_limit=args.train_limit, processes=args.processes)
        print(f"tokenization processes: {args.processes or default_processes()}")
        cache = ArrayCache(Path(scratch) / "nmt-cache")  # fresh: the first load reads and tokenizes
        start = time.perf_counter()
        dataset = load_nmt_dataset(config, cache)
        first = time.perf_counter() - start
        start = time.perf_counter()
        cached = load_nmt_dataset(config, cache)
        second = time.perf_counter() - start
        assert cached.info["cached"] and not dataset.info["cached"]
        print(f"{name} train: {dataset.info['train']} -> {dataset.info['train_pairs']} pairs, "
              f"vocab {dataset.info['src_vocab']}/{dataset.info['tgt_vocab']}")
        print(f"parallel load, first (read + Moses tokenize + vocab + tensorize): {first:8.2f} s")
        print(f"parallel load, cached:                                          {second:8.2f} s")
        print(f"first / cached: {first / second:.0f}x")
        rate, batches, seconds = batcher_speed(cached.train, args.batches,
                                               lambda b: int(b["src_mask"].sum() + b["tgt_mask"].sum()))
        print(f"NMT batcher (B=64, bucketed): {rate:12,.0f} tokens/s (src+tgt, incl. bos/eos; "
              f"{batches} batches in {seconds:.2f} s, {batches / seconds:,.0f} batches/s)")
        if brown.exists():
            pos = load_pos_dataset(PosDataConfig(train=str(brown)), ArrayCache(Path(scratch) / "pos-cache"))
            rate, batches, seconds = batcher_speed(pos.train, args.batches, lambda b: int(b["lengths"].sum()))
            print(f"POS batcher ({'synthetic' if args.quick else 'Brown'}, B=1): {rate:12,.0f} tokens/s "
                  f"({batches} batches in {seconds:.2f} s, {batches / seconds:,.0f} sentences/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
