"""Character features of a word for the POS tagger: prefix and suffix character ids of fixed length (PAPERS.md).

Usage: ``prefix, suffix = affix_ids("Haus", char_vocab)`` -> ``[h, a, u, s, 0, ..]``, ``[0, .., h, a, u, s]``

Layout (part of the batch contract in data/batching.py): the prefix holds the first <= ``length`` chars RIGHT-padded
with 0, so a backward LSTM reading it right-to-left ends on the first char; the suffix holds the last <= ``length``
chars LEFT-padded with 0, so a forward LSTM ends on the last char. Characters not in the vocabulary (seen once in
training, POS paper) map to unk (1).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .vocab import PAD, UNK, Vocabulary

AFFIX_LENGTH = 10


def affix_ids(word: str, chars: Vocabulary, length: int = AFFIX_LENGTH) -> tuple[list[int], list[int]]:
    """``(prefix_ids, suffix_ids)``, each exactly ``length`` long."""
    ids = [chars.stoi.get(c, UNK) for c in word]
    prefix = ids[:length]
    suffix = ids[-length:] if ids else []
    return prefix + [PAD] * (length - len(prefix)), [PAD] * (length - len(suffix)) + suffix


def affix_arrays(words: Sequence[str], chars: Vocabulary, length: int = AFFIX_LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """Prefix and suffix ids of many words: two int64 arrays of shape (len(words), length)."""
    prefixes = np.zeros((len(words), length), dtype=np.int64)  # (N, L)
    suffixes = np.zeros((len(words), length), dtype=np.int64)  # (N, L)
    cache: dict[str, tuple[list[int], list[int]]] = {}
    for row, word in enumerate(words):
        pair = cache.get(word)
        if pair is None:
            pair = cache[word] = affix_ids(word, chars, length)
        prefixes[row], suffixes[row] = pair
    return prefixes, suffixes
