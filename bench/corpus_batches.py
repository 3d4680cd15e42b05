"""Benchmark batches with corpus-like lengths: random ids, each sentence's length (NMT: a pair's two lengths) drawn
from the real corpus when it is there (Brown; the first Europarl fr-en pairs, Moses-tokenized, at most 50 words as
run.py keeps them), else from a gamma distribution with the corpus's mean and spread; bucketed by length like
run.py's NmtBatcher (pools of 100 batches sorted by length, the batches then shuffled). Every batch carries the
host-side `tokens` count (data/batching.py's contract); `pad_to_edges` pads its length dimensions up to bucket edges,
as a batcher's `buckets` do (data/buckets.py), so that shapes repeat (one CUDA graph per shape).

Usage: `lengths, source = corpus_lengths("nmt", corpora_dir()) or (fallback_lengths("nmt", 10_000, rng), "fit")`;
`batches = [make_batch("nmt", lens, 15_000, g) for lens in bucketed(lengths, 64, 100, rng)]`;
`graphable = [pad_to_edges(batch, LENGTH_EDGES["nmt"]) for batch in batches]`
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hogwild.data.buckets import LengthBuckets
from hogwild.models.special_ids import IGNORE_INDEX, PAD

from bench.bench_models import AFFIX, POS_VOCAB

CORPUS = {"pos": "brown", "nmt": "europarl-fr-en"}
NMT_SAMPLE, NMT_MAX_LEN = 5_000, 50  # pairs read for their lengths; run.py's --max-len
POS_MAX_LEN = 180  # Brown's longest sentence
# Without the corpus: gamma(shape, scale) lengths with the corpus's mean and spread (Brown: 20.3 +- 13.1 words;
# Europarl fr-en at most 50 words: source 25.6 +- 11.9, target about 0.91 x source +- 3).
FALLBACK_GAMMA = {"pos": (2.40, 8.46), "nmt": (4.63, 5.53)}
POOL_BATCHES = 100  # run.py's NmtBatcher pools
# Length buckets (padded time dimensions) for shapes that repeat. NMT: source + eos and bos + target + eos, at most
# 52, in steps of 8 (7 edges per side). POS, one sentence per update: steps of 8 to 64 words, then 96 and 128 (a
# handful of Brown's sentences are longer: they keep their own length, a shape outside the buckets).
LENGTH_EDGES = {"nmt": tuple(range(8, 57, 8)), "pos": (*range(8, 65, 8), 96, 128)}


def corpus_lengths(task: str, corpora: Path) -> tuple[np.ndarray, str] | None:
    """Sentence lengths of the task's corpus: POS (N,), NMT (N, 2) source and target; None when it is absent."""
    path = corpora / CORPUS[task]
    if not path.exists():
        return None
    if task == "pos":
        from hogwild.data.readers import read_tagged
        return np.array([len(s) for s in read_tagged(path)]), f"{CORPUS[task]} ({path})"
    from hogwild.data.parallel import read_parallel
    from hogwild.data.moses import tokenize_lines
    pairs = read_parallel(path / "train", "fr", "en", NMT_MAX_LEN, tokenize_lines, limit=NMT_SAMPLE)
    lengths = np.array([(len(s), len(t)) for s, t in zip(pairs.src, pairs.tgt)])
    return lengths, f"{CORPUS[task]} ({path}, first {NMT_SAMPLE} pairs)"


def fallback_lengths(task: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` lengths (NMT: pairs) from the gamma distribution standing in for the corpus."""
    shape, scale = FALLBACK_GAMMA[task]
    high = NMT_MAX_LEN if task == "nmt" else POS_MAX_LEN
    first = np.clip(np.rint(rng.gamma(shape, scale, count)), 1, high).astype(int)
    if task == "pos":
        return first
    second = np.clip(np.rint(0.91 * first + rng.normal(0, 3, count)), 1, NMT_MAX_LEN).astype(int)
    return np.stack([first, second], 1)


def bucketed(lengths: np.ndarray, batch_size: int, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` batches of `batch_size` lengths drawn from `lengths`, sorted by length inside pools of POOL_BATCHES
    batches (as run.py's NmtBatcher), the batches then shuffled. Each batch: (B,) or (B, 2)."""
    drawn = lengths[rng.integers(0, len(lengths), count * batch_size)]
    batches = []
    pool = batch_size * POOL_BATCHES
    for start in range(0, len(drawn), pool):
        chunk = drawn[start:start + pool]
        order = np.lexsort(chunk.T[::-1]) if chunk.ndim == 2 else np.argsort(chunk, kind="stable")
        chunk = chunk[order]
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def make_batch(task: str, lengths: np.ndarray, vocab: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """A batch of the models' contract (data/batching.py) with random ids and these lengths."""
    if task == "pos":
        lens = torch.from_numpy(lengths).long()  # (B,)
        rows, width = len(lens), int(lens.max())
        real = torch.arange(width) < lens[:, None]  # (B, T)
        words = torch.randint(4, POS_VOCAB["n_words"], (rows, width), generator=g) * real
        word_len = torch.randint(2, AFFIX + 1, (rows, width), generator=g)
        chars = torch.randint(4, POS_VOCAB["n_chars"], (rows, width, AFFIX), generator=g) * real[..., None]
        positions = torch.arange(AFFIX)
        tags = torch.randint(0, POS_VOCAB["n_tags"], (rows, width), generator=g).masked_fill(~real, -100)
        return {"words": words, "prefixes": chars.masked_fill(positions >= word_len[..., None], 0),
                "suffixes": chars.masked_fill(positions < AFFIX - word_len[..., None], 0), "tags": tags,
                "lengths": lens, "tokens": int(lens.sum())}
    src_len, tgt_len = torch.from_numpy(lengths[:, 0]).long(), torch.from_numpy(lengths[:, 1]).long()
    rows = len(src_len)
    src = torch.randint(4, vocab, (rows, int(src_len.max()) + 1), generator=g)
    src = src.masked_fill(torch.arange(src.shape[1]) > src_len[:, None], 0)
    src[torch.arange(rows), src_len] = 3  # eos
    tgt = torch.randint(4, vocab, (rows, int(tgt_len.max()) + 2), generator=g)
    tgt = tgt.masked_fill(torch.arange(tgt.shape[1]) > tgt_len[:, None] + 1, 0)
    tgt[:, 0] = 2  # bos
    tgt[torch.arange(rows), tgt_len + 1] = 3
    return {"src": src, "src_mask": src != 0, "tgt": tgt, "tgt_mask": tgt != 0,
            "tokens": int(tgt_len.sum()) + rows}  # words + eos


def pad_to_edges(batch: dict, edges: tuple[int, ...]) -> dict:
    """The batch with each length dimension (dim 1 of every tensor of 2+ dims: POS T, NMT S and T) padded up to the
    smallest edge that holds it (a length past the last edge is kept), with each field's padding (tags -100, ids
    0, masks False); the loss and its gradients stay the same (tests/models/test_padded_paths.py)."""
    buckets = LengthBuckets(edges)
    out = dict(batch)
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            extra = buckets.length(value.shape[1]) - value.shape[1]
            if extra:
                fill = IGNORE_INDEX if key == "tags" else PAD
                pad = value.new_full((value.shape[0], extra, *value.shape[2:]), fill)
                out[key] = torch.cat([value, pad], dim=1)
    return out
