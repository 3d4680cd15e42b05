"""Vocabularies: token <-> id maps with the project's special symbols, top-K and minimum-frequency cuts, JSON files.

Usage: ``vocab = Vocabulary.build(sentences, max_size=15000, min_freq=1); ids = vocab.encode(["le", "chat"], eos=True)``

Special ids are fixed for every vocabulary (part of the batch contract in data/batching.py, defined once in
models/special_ids.py): pad = 0, unk = 1, bos = 2, eos = 3. Tag vocabularies use ``specials=TAG_SPECIALS`` (pad = 0,
unk = 1 for tags never seen in training); batches mark padded tag positions with -100, never with pad. Ties in
frequency are broken by first appearance, so a vocabulary is a pure function of its input.
"""
from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from hogwild.models.special_ids import BOS, EOS, PAD, UNK

from .errors import CorpusError, read_json

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
TAG_SPECIALS = ("<pad>", "<unk>")


class Vocabulary:
    """An ordered list of tokens; the first ``len(specials)`` are the special symbols."""

    def __init__(self, tokens: Sequence[str], specials: Sequence[str] = SPECIALS):
        specials = tuple(specials)
        if len(specials) < 2 or specials[PAD] != SPECIALS[PAD] or specials[UNK] != SPECIALS[UNK]:
            raise ValueError(f"specials must start with {SPECIALS[:2]}, got {specials}")
        self.specials = specials
        self.itos: list[str] = list(specials)
        self.stoi: dict[str, int] = {token: index for index, token in enumerate(self.itos)}
        for token in tokens:
            if token in self.stoi:
                raise ValueError(f"duplicate token {token!r} in vocabulary")
            self.stoi[token] = len(self.itos)
            self.itos.append(token)

    @classmethod
    def from_counts(cls, counts: Counter, max_size: int | None = None, min_freq: int = 1,
                    specials: Sequence[str] = SPECIALS) -> "Vocabulary":
        """The ``max_size`` most frequent tokens (specials not counted) seen at least ``min_freq`` times."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        # Counter.most_common keeps insertion order among equal counts: deterministic for a given corpus order.
        kept = [t for t, c in counts.most_common() if c >= min_freq and t not in specials]
        return cls(kept if max_size is None else kept[:max_size], specials)

    @classmethod
    def from_arrays(cls, types: Sequence[str], counts: np.ndarray, first: np.ndarray, max_size: int | None = None,
                    min_freq: int = 1, specials: Sequence[str] = SPECIALS) -> "Vocabulary":
        """:meth:`from_counts` for counts kept as arrays (a streamed corpus, data/streamed_nmt.py): ``types[i]`` seen
        ``counts[i]`` times, first at position ``first[i]``, which breaks ties in count as a Counter's insertion
        order does; the same vocabulary as from_counts over the same tokens."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        seen = np.flatnonzero(counts >= min_freq)
        ranked = seen[np.lexsort((first[seen], -counts[seen]))]  # by count, descending, then first appearance
        kept = (types[i] for i in ranked if types[i] not in specials)
        return cls(list(kept if max_size is None else itertools.islice(kept, max_size)), specials)

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]], max_size: int | None = None, min_freq: int = 1,
              specials: Sequence[str] = SPECIALS) -> "Vocabulary":
        """Count tokens over sequences (e.g. sentences) and keep the frequent ones; see :meth:`from_counts`."""
        counts: Counter = Counter()
        for sequence in sequences:
            counts.update(sequence)
        return cls.from_counts(counts, max_size, min_freq, specials)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos and self.specials == other.specials

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)}, specials={self.specials})"

    def index(self, token: str) -> int:
        """Id of ``token``; unk (1) when absent."""
        return self.stoi.get(token, UNK)

    def encode(self, tokens: Iterable[str], bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of tokens, unknown ones as unk (1); optionally bos (2) first and eos (3) last."""
        ids = [self.stoi.get(token, UNK) for token in tokens]
        if bos:
            ids.insert(0, BOS)
        if eos:
            ids.append(EOS)
        return ids

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """Tokens of ids. With ``strip``: drop pad and bos, stop at the first eos (a decoder's output)."""
        tokens = []
        has_ends = len(self.specials) > EOS
        for i in ids:
            i = int(i)
            if strip and has_ends and i == EOS:
                break
            if strip and (i == PAD or (has_ends and i == BOS)):
                continue
            tokens.append(self.itos[i] if 0 <= i < len(self.itos) else self.itos[UNK])
        return tokens

    def to_dict(self) -> dict:
        return {"specials": list(self.specials), "tokens": self.itos[len(self.specials):]}

    @classmethod
    def from_dict(cls, state: dict) -> "Vocabulary":
        return cls(state["tokens"], state["specials"])

    def save(self, path: str | os.PathLike) -> None:
        """Write JSON ``{"specials": [...], "tokens": [...]}`` (ids are list positions, specials first)."""
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocabulary":
        """A vocabulary file written by `save`; one that is not (not JSON, another shape) is named with its path."""
        state = read_json(path)
        fields = (state.get("tokens"), state.get("specials")) if isinstance(state, dict) else (None, None)
        if not all(isinstance(field, list) and all(isinstance(token, str) for token in field) for field in fields):
            raise CorpusError('not a vocabulary file (a JSON object {"specials": [...], "tokens": [...]} of strings)',
                              path=path)
        try:
            return cls.from_dict(state)
        except ValueError as error:
            raise CorpusError(f"not a vocabulary file ({error})", path=path) from None
