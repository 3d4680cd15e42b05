"""Forward+backward time per update of the POS tagger and the NMT model, `small` and `paper` presets, on CPU (and on
a GPU when one is available and asked for). Batches are seeded random ids with realistic shapes (POS: the paper's one
sentence of 25 tokens, and 16 sentences; NMT: 64 pairs of 25-30 words), so no corpus is needed. The configurations are
timed interleaved, round after round, and the median per configuration is reported with its ratio to the first one.
For NMT, the decoder's step loop share is shown by also timing the encoder alone (forward+backward of a loss on it).

Usage:
    flock /tmp/hogwild-heavy.lock .venv/bin/python -m bench.bench_models --rounds 5 --paper-rounds 2
    python -m bench.bench_models --quick   (small presets, 1 round, 2,000 NMT words: seconds, measures nothing)
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import nullcontext

import torch

from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset
from hogwild.models.host_fields import to_device
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options

from bench import command_line

AFFIX = 10
POS_VOCAB = dict(n_words=10_000, n_chars=100, n_tags=470)  # about Brown's sizes (8,296 words, 86 chars, 469 tags)


def pos_batch(sentences: int, length: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """`sentences` sentences of `length` tokens, words of 2..10 chars, affixes padded as in data/features.py."""
    words = torch.randint(1, POS_VOCAB["n_words"], (sentences, length), generator=g)
    word_lengths = torch.randint(2, AFFIX + 1, (sentences, length), generator=g)
    chars = torch.randint(4, POS_VOCAB["n_chars"], (sentences, length, AFFIX), generator=g)
    positions = torch.arange(AFFIX)
    prefixes = chars.masked_fill(positions >= word_lengths[..., None], 0)  # right-padded
    suffixes = chars.masked_fill(positions < AFFIX - word_lengths[..., None], 0)  # left-padded
    tags = torch.randint(0, POS_VOCAB["n_tags"], (sentences, length), generator=g)
    return {"words": words, "prefixes": prefixes, "suffixes": suffixes, "tags": tags,
            "lengths": torch.full((sentences,), length)}


def nmt_batch(pairs: int, vocab: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """`pairs` pairs with 25..30 source and target words (+ eos, + bos), padded."""
    src_len = torch.randint(25, 31, (pairs,), generator=g)
    tgt_len = torch.randint(25, 31, (pairs,), generator=g)
    src = torch.randint(4, vocab, (pairs, 31), generator=g)
    tgt = torch.randint(4, vocab, (pairs, 32), generator=g)
    src = src.masked_fill(torch.arange(31) > src_len[:, None], 0)
    src[torch.arange(pairs), src_len] = 3
    tgt = tgt.masked_fill(torch.arange(32) > tgt_len[:, None] + 1, 0)
    tgt[:, 0] = 2
    tgt[torch.arange(pairs), tgt_len + 1] = 3
    return {"src": src, "src_mask": src != 0, "tgt": tgt, "tgt_mask": tgt != 0}


def encoder_only_loss(model: AttentionNMT, batch: dict) -> tuple[torch.Tensor, int]:
    """A loss that touches only the encoder: the cost of everything but the decoder."""
    encoded = model.encode(batch["src"], batch["src_mask"])
    return encoded.keys.sum() + encoded.initial_state.sum(), 1


def time_update(model, loss_fn, batch, device, amp: str | None = None) -> float:
    """Seconds of one zero_grad + forward + backward (the forward under bf16 autocast with amp="bf16")."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext():
        loss, _ = loss_fn(model, batch)
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def time_cases(cases: list[tuple], device) -> dict[str, list[float]]:
    """Each case (name, model, loss_fn, batch, rounds) warmed up once (allocator, first-call overheads), then timed
    `rounds` times, the cases interleaved round by round: name -> seconds of each update."""
    for _, model, loss_fn, batch, _ in cases:
        time_update(model, loss_fn, batch, device)
    times: dict[str, list[float]] = {name: [] for name, *_ in cases}
    for r in range(max(c[4] for c in cases)):
        for name, model, loss_fn, batch, rounds in cases:
            if r < rounds:
                times[name].append(time_update(model, loss_fn, batch, device))
    return times


def step_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of a benchmark that times the models' steps: its docstring's first paragraph, and of run.py's
    options --vocab-size (or --config FILE's)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0] + "\n\nOf run.py's options it takes "
                                "--vocab-size (or --config FILE's).", formatter_class=HelpFormatter)
    add_run_options(p, only=("vocab_size",))
    return p


def rounds_parser(doc: str, paper_rounds: int) -> argparse.ArgumentParser:
    """step_parser with the flags of a benchmark that times the presets' steps in interleaved rounds (time_cases)."""
    p = step_parser(doc)
    p.add_argument("--device", default="cpu", help="cpu, or cuda when a GPU is available")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds for the small presets")
    p.add_argument("--paper-rounds", type=int, default=paper_rounds,
                   help="timed rounds for the paper presets (0: skip them)")
    return p


def rounds_device(args: argparse.Namespace, name: str) -> torch.device:
    """The device of a rounds benchmark (rounds_parser's flags), with its --threads; exits naming the benchmark when
    CUDA is asked for and torch sees no GPU."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"{name}: --device cuda asked for, but torch sees no GPU")
    return device


def preset_models(args: argparse.Namespace, device: torch.device) -> Iterator[tuple[str, int, POSTagger,
                                                                                   AttentionNMT]]:
    """(preset, rounds, tagger, NMT model) of each preset a rounds benchmark times: small (--rounds), then paper
    (--paper-rounds), each skipped at 0 rounds; both models seeded alike, on `device`."""
    for preset in ("small", "paper"):
        rounds = args.rounds if preset == "small" else args.paper_rounds
        if rounds == 0:
            continue
        torch.manual_seed(0)
        yield (preset, rounds, POSTagger(pos_preset(preset, **POS_VOCAB)).to(device),
               AttentionNMT(nmt_preset(preset, src_words=args.vocab_size, tgt_words=args.vocab_size)).to(device))


def build_parser() -> argparse.ArgumentParser:
    p = rounds_parser(__doc__, paper_rounds=2)
    p.add_argument("--quick", action="store_true", help="--rounds 1 --paper-rounds 0 --vocab-size 2000: seconds (CI)")
    return p


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    _, args = parse_run_options(p, argv)  # the run options' values are checked, then read from args
    if args.quick:
        args.rounds, args.paper_rounds, args.vocab_size = 1, 0, 2000
    device = rounds_device(args, "bench_models")
    g = torch.Generator().manual_seed(0)
    pos_one, pos_16 = to_device(pos_batch(1, 25, g), device), to_device(pos_batch(16, 25, g), device)
    nmt_64 = to_device(nmt_batch(64, args.vocab_size, g), device)
    cases = []  # (name, model, loss_fn, batch, rounds)
    for preset, rounds, tagger, nmt in preset_models(args, device):
        cases += [(f"pos/{preset} B=1x25", tagger, pos_loss, pos_one, rounds),
                  (f"pos/{preset} B=16x25", tagger, pos_loss, pos_16, rounds),
                  (f"nmt/{preset} B=64 full", nmt, nmt_loss, nmt_64, rounds),
                  (f"nmt/{preset} B=64 encoder only", nmt, encoder_only_loss, nmt_64, rounds)]
    times = time_cases(cases, device)
    print(f"# bench_models: {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, device {device}, "
          f"threads {torch.get_num_threads()}")
    print("# command: " + command_line())
    base = statistics.median(times[cases[0][0]])
    print(f"{'configuration':34s} {'ms/update':>10s} {'x first':>8s} {'rounds':>6s}")
    for name, *_ in cases:
        median = statistics.median(times[name])
        print(f"{name:34s} {median * 1e3:10.1f} {median / base:8.2f} {len(times[name]):6d}")
    for preset in ("small", "paper"):
        full, enc = times.get(f"nmt/{preset} B=64 full"), times.get(f"nmt/{preset} B=64 encoder only")
        if full and enc:
            share = 1 - statistics.median(enc) / statistics.median(full)
            print(f"# nmt/{preset}: decoder (step loop + readout + softmax) = {share:.0%} of the update")


if __name__ == "__main__":
    main()
