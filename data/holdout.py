"""Held-out sets cut from a training corpus: the seeded split of sentences or pairs, and how many NMT pairs to hold
out when no dev corpus is given. One definition for the POS and NMT datasets, in memory or streamed.

Usage: ``train, dev = split_sentences(sentences, 0.1, seed)``; ``is_dev = held_out_mask(pairs, 0.1, seed)``;
``held_out_size(pairs, 0.1, 3000)``
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MIN_SPLIT_PAIRS = 10  # without a dev corpus, fewer kept pairs are refused: 10% of them is not one pair


def held_out_mask(count: int, dev_fraction: float, seed: int) -> np.ndarray:
    """(count,) bool, True for the held-out items: ``round(count * dev_fraction)`` of them (at least 1, at most
    count - 1), chosen by a seeded permutation."""
    if count < 2:
        raise ValueError(f"need at least 2 sentences to split, got {count}")
    n_dev = min(max(1, round(count * dev_fraction)), count - 1)
    is_dev = np.zeros(count, dtype=bool)
    is_dev[np.random.default_rng(seed).permutation(count)[:n_dev]] = True
    return is_dev


def split_sentences(sentences: Sequence, dev_fraction: float = 0.1, seed: int = 0) -> tuple[list, list]:
    """Seeded random ``(train, dev)`` split (held_out_mask); both parts keep corpus order."""
    is_dev = held_out_mask(len(sentences), dev_fraction, seed)
    return ([s for s, d in zip(sentences, is_dev) if not d], [s for s, d in zip(sentences, is_dev) if d])


def held_out_size(pairs: int, fraction: float, cap: int) -> int:
    """Pairs held out of `pairs` when no dev corpus is given: round(fraction * pairs), at least 1, at most `cap`,
    so that at least (1 - fraction) of the corpus is trained on. Raises ValueError below MIN_SPLIT_PAIRS."""
    if pairs < MIN_SPLIT_PAIRS:
        raise ValueError(f"{pairs} pairs: too few to hold out a {fraction:.0%} split (at least {MIN_SPLIT_PAIRS} "
                         f"are needed)")
    return min(cap, max(1, round(pairs * fraction)))
