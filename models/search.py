"""Batched greedy and beam-search decoding for AttentionNMT.

Beam search keeps beam_size hypotheses per sentence in one (B * K) batch. A hypothesis that emitted eos stays in its
slot with its score frozen (it can only be extended by pad at no cost), so finished and open hypotheses compete on
raw log-probability during the search, as in dl4mt/Nematus; the final choice among a sentence's K hypotheses uses the
length-normalised score  log p / length ** length_penalty  (length counts eos; 0 disables normalisation). Both
searches never emit pad or bos; a sentence stops at eos or after min(max_len_a * source_length + max_len_b, max_len)
words (source length with eos; max_len None: no cap), so a sentence's translation does not depend on the other
sentences of its batch, and the batch stops as soon as every sentence has. Sorting sentences by length before
batching keeps one long sentence from holding up the short ones.

Usage:
    hypotheses = beam_search(model, batch["src"], batch["src_mask"], beam_size=5)   # list of word-id lists
    hypotheses = greedy_search(model, batch["src"], batch["src_mask"])
"""
from __future__ import annotations

import torch
from torch import Tensor

from .nmt import AttentionNMT
from .special_ids import BOS, EOS, PAD


def _max_steps(src_mask: Tensor, max_len_a: float, max_len_b: int, max_len: int | None = None) -> Tensor:
    """Per-sentence limit on generated words (eos included): (B,) in [1, max_len], from the source length (eos
    included)."""
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1 or None, got {max_len}")
    return (max_len_a * src_mask.sum(1).float() + max_len_b).long().clamp(min=1, max=max_len)


def _forbid(log_probs: Tensor, finished: Tensor) -> Tensor:
    """Open rows may not emit pad or bos; finished rows may only emit pad, at no cost. (R, V) -> (R, V)."""
    log_probs = log_probs.clone()
    log_probs[:, PAD] = float("-inf")
    log_probs[:, BOS] = float("-inf")
    frozen = torch.full_like(log_probs[0], float("-inf"))
    frozen[PAD] = 0.0
    return torch.where(finished[:, None], frozen, log_probs)


def _strip(rows: list[list[int]]) -> list[list[int]]:
    """Cut each word-id row at its first eos (dropping it) and drop pad."""
    out = []
    for row in rows:
        words = row[:row.index(EOS)] if EOS in row else row
        out.append([w for w in words if w != PAD])
    return out


@torch.no_grad()
def greedy_search(model: AttentionNMT, src: Tensor, src_mask: Tensor, max_len_a: float = 2.0,
                  max_len_b: int = 10, max_len: int | None = None) -> list[list[int]]:
    """src (B, S), src_mask (B, S) -> for each sentence the most likely word at each step, without bos/eos."""
    was_training = model.training
    model.eval()
    try:
        encoded = model.encode(src, src_mask)
        state = encoded.initial_state  # (B, H)
        previous = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        limits = _max_steps(src_mask, max_len_a, max_len_b, max_len)  # (B,)
        words = []
        for step in range(int(limits.max())):
            log_probs, state = model.decode_step(previous, state, encoded)  # (B, V)
            previous = _forbid(log_probs, finished).argmax(-1)  # (B,)
            words.append(previous)
            finished = finished | (previous == EOS) | (limits <= step + 1)
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    return _strip(torch.stack(words, 1).tolist())


@torch.no_grad()
def beam_search(model: AttentionNMT, src: Tensor, src_mask: Tensor, beam_size: int = 5, length_penalty: float = 1.0,
                max_len_a: float = 2.0, max_len_b: int = 10, max_len: int | None = None) -> list[list[int]]:
    """src (B, S), src_mask (B, S) -> for each sentence the best of beam_size hypotheses (without bos/eos) by
    log p / length ** length_penalty."""
    vocab = model.config.tgt_words
    if not 1 <= beam_size <= vocab - 2:
        raise ValueError(f"beam_size must be in [1, {vocab - 2}] for a {vocab}-word target vocabulary, got {beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    was_training = model.training
    model.eval()
    try:
        batch, k, device = src.shape[0], beam_size, src.device
        encoded = model.encode(src, src_mask).select(torch.arange(batch, device=device).repeat_interleave(k))
        state = encoded.initial_state  # (B*K, H)
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0  # all K beams start identical: expand only the first one
        words = torch.full((batch * k, 0), BOS, dtype=torch.long, device=device)
        previous = torch.full((batch * k,), BOS, dtype=torch.long, device=device)
        finished = torch.zeros(batch * k, dtype=torch.bool, device=device)
        lengths = torch.zeros(batch * k, device=device)
        row_offset = (torch.arange(batch, device=device) * k)[:, None]  # (B, 1)
        limits = _max_steps(src_mask, max_len_a, max_len_b, max_len).repeat_interleave(k)  # (B*K,)
        for step in range(int(limits.max())):
            log_probs, state = model.decode_step(previous, state, encoded)  # (B*K, V)
            candidates = scores.reshape(-1, 1) + _forbid(log_probs, finished)  # (B*K, V)
            scores, best = candidates.reshape(batch, k * vocab).topk(k, dim=-1)  # (B, K)
            origin = (row_offset + best // vocab).reshape(-1)  # (B*K,) row each new hypothesis extends
            previous = (best % vocab).reshape(-1)  # (B*K,)
            lengths = lengths[origin] + (~finished[origin]).float()
            finished = finished[origin] | (previous == EOS) | (limits <= step + 1)
            words = torch.cat([words[origin], previous[:, None]], dim=1)
            state = state[origin]
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    normalised = scores / lengths.reshape(batch, k).clamp(min=1.0) ** length_penalty  # (B, K)
    chosen = (torch.arange(batch, device=device) * k + normalised.argmax(-1)).tolist()
    return _strip(words[chosen].tolist())
