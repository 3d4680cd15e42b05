"""What the padded, graph-capturable loss path (nmt_loss / pos_loss with padded=True) costs against the packed path,
eager, per update (zero_grad + forward + backward), on the CPU or a GPU. No graph is captured here: on a GPU the
padded path's eager time shows its extra arithmetic (the padding is computed, not skipped) that a CUDA graph then has
to win back in launches.

Batches are seeded random ids with mixed lengths (POS: 1 and 16 sentences of 5-45 tokens; NMT: 64 pairs of 10-50
words; --pairs), each timed three ways: packed at the batch's own length (today's step), padded at the same length, and padded
up to its bucket edge (what a graph per bucket runs: edges 8, 16, 24, 32, 48, 64). The configurations are timed
interleaved, round after round; the median per configuration is reported with its ratio to the packed one.

Usage:
    flock /tmp/hogwild-heavy.lock .venv/bin/python -m bench.bench_padded --rounds 5 --paper-rounds 2
    python -m bench.bench_padded --quick   (small presets, 1 round, 16 NMT pairs of 2,000 words: seconds, measures
                                            nothing)
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from hogwild.data.buckets import LengthBuckets
from hogwild.models import nmt_loss, pos_loss
from hogwild.models.host_fields import to_device
from hogwild.tasks.run_flags import parse_run_options

from bench import command_line
from bench.bench_models import AFFIX, POS_VOCAB, preset_models, rounds_device, rounds_parser, time_cases

EDGES = (8, 16, 24, 32, 48, 64)


def pad_time(tensor: torch.Tensor, dim: int, length: int, value: int | bool) -> torch.Tensor:
    """tensor padded with `value` along `dim` up to `length`."""
    shape = list(tensor.shape)
    shape[dim] = length - tensor.shape[dim]
    return torch.cat([tensor, tensor.new_full(shape, value)], dim=dim)


def pos_batch(sentences: int, g: torch.Generator, edges: tuple[int, ...] | None = None) -> dict:
    """`sentences` sentences of 5..45 tokens, words of 2..10 chars, padded to the longest (or its bucket edge)."""
    lengths = torch.randint(5, 46, (sentences,), generator=g)
    steps = int(lengths.max())
    real = torch.arange(steps) < lengths[:, None]  # (B, T)
    words = torch.randint(1, POS_VOCAB["n_words"], (sentences, steps), generator=g).masked_fill(~real, 0)
    word_lengths = torch.randint(2, AFFIX + 1, (sentences, steps), generator=g).masked_fill(~real, 0)
    chars = torch.randint(4, POS_VOCAB["n_chars"], (sentences, steps, AFFIX), generator=g)
    positions = torch.arange(AFFIX)
    prefixes = chars.masked_fill(positions >= word_lengths[..., None], 0)  # right-padded
    suffixes = chars.masked_fill(positions < AFFIX - word_lengths[..., None], 0)  # left-padded
    tags = torch.randint(0, POS_VOCAB["n_tags"], (sentences, steps), generator=g).masked_fill(~real, -100)
    batch = {"words": words, "prefixes": prefixes, "suffixes": suffixes, "tags": tags, "lengths": lengths,
             "tokens": int(lengths.sum())}
    return bucketed_pos(batch, edges) if edges else batch


def bucketed_pos(batch: dict, edges: tuple[int, ...]) -> dict:
    steps = LengthBuckets(edges).length(batch["words"].shape[1])
    return {**batch, **{key: pad_time(batch[key], 1, steps, -100 if key == "tags" else 0)
                        for key in ("words", "prefixes", "suffixes", "tags")}}


def nmt_batch(pairs: int, vocab: int, g: torch.Generator) -> dict:
    """`pairs` pairs of 10..50 source and target words (+ eos, + bos), padded to the longest."""
    src_len, tgt_len = torch.randint(10, 51, (pairs,), generator=g), torch.randint(10, 51, (pairs,), generator=g)
    s, t = int(src_len.max()) + 1, int(tgt_len.max()) + 2
    src = torch.randint(4, vocab, (pairs, s), generator=g).masked_fill(torch.arange(s) > src_len[:, None], 0)
    src[torch.arange(pairs), src_len] = 3
    tgt = torch.randint(4, vocab, (pairs, t), generator=g).masked_fill(torch.arange(t) > tgt_len[:, None] + 1, 0)
    tgt[:, 0] = 2
    tgt[torch.arange(pairs), tgt_len + 1] = 3
    return {"src": src, "src_mask": src != 0, "tgt": tgt, "tgt_mask": tgt != 0, "tokens": int(tgt_len.sum()) + pairs}


def bucketed_nmt(batch: dict, edges: tuple[int, ...]) -> dict:
    s, t = (LengthBuckets(edges).length(batch[key].shape[1]) for key in ("src", "tgt"))
    return {**batch, "src": pad_time(batch["src"], 1, s, 0), "src_mask": pad_time(batch["src_mask"], 1, s, False),
            "tgt": pad_time(batch["tgt"], 1, t, 0), "tgt_mask": pad_time(batch["tgt_mask"], 1, t, False)}


def three_ways(name: str, model, loss_fn, batch: dict, bucketed: dict, rounds: int) -> list[tuple]:
    """(name, model, loss_fn, batch, rounds) for packed, padded and padded to the bucket edge."""
    padded = functools.partial(loss_fn, padded=True)
    shape = (f"T={bucketed['words'].shape[1]}" if "words" in bucketed else
             f"S={bucketed['src'].shape[1]},T={bucketed['tgt'].shape[1]}")
    return [(f"{name} packed", model, loss_fn, batch, rounds),
            (f"{name} padded", model, padded, batch, rounds),
            (f"{name} padded to {shape}", model, padded, bucketed, rounds)]


def build_parser() -> argparse.ArgumentParser:
    p = rounds_parser(__doc__, paper_rounds=0)
    p.add_argument("--pairs", type=int, default=64, help="NMT pairs per batch")
    p.add_argument("--quick", action="store_true",
                   help="--rounds 1 --paper-rounds 0 --vocab-size 2000 --pairs 16: seconds (CI)")
    return p


def main(argv: list[str] | None = None) -> None:
    _, args = parse_run_options(build_parser(), argv)  # the run options' values are checked, then read from args
    if args.quick:
        args.rounds, args.paper_rounds, args.vocab_size, args.pairs = 1, 0, 2000, 16
    device = rounds_device(args, "bench_padded")
    g = torch.Generator().manual_seed(0)
    pos_one, pos_16, nmt_64 = pos_batch(1, g), pos_batch(16, g), nmt_batch(args.pairs, args.vocab_size, g)
    batches = {name: (to_device(batch, device), to_device(bucket(batch, EDGES), device)) for name, batch, bucket in
               (("pos1", pos_one, bucketed_pos), ("pos16", pos_16, bucketed_pos), ("nmt", nmt_64, bucketed_nmt))}
    cases = []  # (name, model, loss_fn, batch, rounds)
    for preset, rounds, tagger, nmt in preset_models(args, device):
        cases += three_ways(f"pos/{preset} B=1", tagger, pos_loss, *batches["pos1"], rounds)
        cases += three_ways(f"pos/{preset} B=16", tagger, pos_loss, *batches["pos16"], rounds)
        cases += three_ways(f"nmt/{preset} B={args.pairs}", nmt, nmt_loss, *batches["nmt"], rounds)
    times = time_cases(cases, device)
    print(f"# bench_padded: {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, device {device}, "
          f"threads {torch.get_num_threads()}")
    print("# command: " + command_line())
    print(f"{'configuration':40s} {'ms/update':>10s} {'x packed':>9s} {'rounds':>6s}")
    for i, (name, *_) in enumerate(cases):
        median, packed = statistics.median(times[name]), statistics.median(times[cases[i - i % 3][0]])
        print(f"{name:40s} {median * 1e3:10.1f} {median / packed:9.2f} {len(times[name]):6d}")


if __name__ == "__main__":
    main()
