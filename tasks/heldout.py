"""Held-out sets for evaluation: batches sorted by length (a long sentence holds up only its own batch), NMT pairs cut
to a length cap (so that no evaluation is unbounded), and a seeded fixed sample for the periodic checks.

Every evaluation batch carries "index" (B,): each row's position in the set, so `translate` returns the translations
in set order, which is `HeldOut.rows` order of the held-out corpus (corpus order for the full set).

Usage: `full = nmt_heldout(task.dev, count)`; `periodic = nmt_heldout(task.dev, count, sample=500, seed=0)`;
`refs = [references[i] for i in periodic.rows]`; `translate(model, periodic.batches, beam_size=1, max_len=DECODE_MAX_LEN)`
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hogwild.data.batching import NmtBatcher, PosBatcher
from hogwild.models.special_ids import EOS, PAD

EVAL_MAX_LEN = 100  # held-out pairs longer than this many units (either side) are cut to it for evaluation
DECODE_MAX_LEN = 2 * EVAL_MAX_LEN  # no translation during evaluation is longer than this many words
EVAL_BATCH = 64  # pairs per evaluation batch


@dataclass
class HeldOut:
    batches: list[dict[str, torch.Tensor]]  # sorted by source length, each with "index" (B,) into `rows`
    rows: list[int]  # held-out corpus position of each pair of the set, in set order
    truncated: int  # pairs cut to the length cap


def cap_source(batch: dict[str, torch.Tensor], max_len: int = EVAL_MAX_LEN) -> dict[str, torch.Tensor]:
    """src (B, S) cut to max_len units + eos; src_mask follows (what `translate` does to a long input line)."""
    src = batch["src"]
    if src.shape[1] > max_len + 1:
        src = src[:, :max_len + 1].clone()
        src[:, max_len] = torch.where(src[:, max_len] != PAD, EOS, PAD)  # a cut row ends in eos again
    return dict(batch, src=src, src_mask=src != PAD)


def cap_lengths(batch: dict[str, torch.Tensor], max_len: int) -> dict[str, torch.Tensor]:
    """src (B, S) cut to max_len units + eos, tgt (B, T) to bos + max_len units + eos; masks and the host-side
    token count follow."""
    src, tgt = cap_source(batch, max_len)["src"], batch["tgt"]
    if tgt.shape[1] > max_len + 2:
        tgt = tgt[:, :max_len + 2].clone()
        tgt[:, max_len + 1] = torch.where(tgt[:, max_len + 1] != PAD, EOS, PAD)
    tgt_mask = tgt != PAD
    return dict(batch, src=src, src_mask=src != PAD, tgt=tgt, tgt_mask=tgt_mask, tokens=int(tgt_mask[:, 1:].sum()))


def sample_rows(count: int, sample: int | None, seed: int) -> np.ndarray:
    """0 .. count-1, or a seeded sample of `sample` of them in increasing order (None or >= count: all)."""
    if sample is None or sample >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=sample, replace=False))


def length_sorted(batcher: NmtBatcher | PosBatcher, rows: np.ndarray, lengths: np.ndarray, batch_size: int,
                  ) -> list[dict[str, torch.Tensor]]:
    """The batcher's batches of `rows`, shortest `lengths` first; "index" (B,) is each row's position in `rows`."""
    order = np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        positions = order[start:start + batch_size]
        batch = batcher.batch(rows[positions])
        batch["index"] = torch.from_numpy(positions.astype(np.int64))
        batches.append(batch)
    return batches


def _check_count(batcher: NmtBatcher | PosBatcher, count: int) -> None:
    if not 1 <= count <= batcher.size:
        raise ValueError(f"held-out set: count must be in [1, {batcher.size}], got {count}")


def nmt_heldout(batcher: NmtBatcher, count: int, sample: int | None = None, seed: int = 0,
                max_len: int = EVAL_MAX_LEN, batch_size: int = EVAL_BATCH) -> HeldOut:
    """The first `count` pairs of the batcher's corpus, or a seeded sample of `sample` of them (kept in corpus
    order), as length-sorted batches with pairs cut to `max_len` units."""
    _check_count(batcher, count)
    rows = sample_rows(count, sample, seed)
    src_lengths, tgt_lengths = batcher.data.src_lengths[rows], batcher.data.tgt_lengths[rows]
    batches = [cap_lengths(batch, max_len) for batch in length_sorted(batcher, rows, src_lengths, batch_size)]
    truncated = int(((src_lengths > max_len) | (tgt_lengths > max_len)).sum())
    return HeldOut(batches, rows.tolist(), truncated)


def pos_heldout(batcher: PosBatcher, count: int, sample: int | None = None, seed: int = 0,
                batch_size: int = EVAL_BATCH) -> HeldOut:
    """The first `count` sentences of the batcher's corpus, or a seeded sample of `sample` of them, as
    length-sorted batches (tagging has no length limit: its cost is linear in the tokens)."""
    _check_count(batcher, count)
    rows = sample_rows(count, sample, seed)
    lengths = np.diff(batcher.data.offsets)[rows]
    return HeldOut(length_sorted(batcher, rows, lengths, batch_size), rows.tolist(), 0)


def full_and_periodic(make: Callable[..., HeldOut], batcher, count: int, sample: int | None,
                      seed: int) -> tuple[HeldOut, HeldOut]:
    """The whole held-out set (`make(batcher, count)`: pos_heldout or nmt_heldout) and the periodic evaluations'
    seeded sample of it; one and the same set when the sample would be all of it (built and held once)."""
    full = make(batcher, count)
    if sample is None or sample >= count:
        return full, full
    return full, make(batcher, count, sample=sample, seed=seed)
