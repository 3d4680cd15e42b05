"""One chunk of parallel lines, in a pool worker: tokenized (Moses or subwords, as data/encoders.py's NmtText does
for training text), filtered (empty and too-long pairs counted), and sent back as ids and counts, not strings.

The worker knows no corpus-wide vocabulary, so each side comes back as its chunk's own types (the distinct units, in
order of first appearance), the ids of its tokens into them, each type's count and first position: the parent
(data/streamed_nmt.py) maps the types to corpus-wide ids and writes the ids out. A chunk of 5,000 Europarl pairs
holds about 135,000 tokens per side but about 15,000 types.

Usage: ``result = encode_chunk((text, max_len, src_lines, tgt_lines))`` (in a Pool: ``pool.apply_async(encode_chunk,
(task,))``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .encoders import NmtText
from .parallel import pair_verdict


@dataclass
class SideIds:
    """One side of a chunk's kept pairs."""
    types: list[str]      # distinct units in order of first appearance: local id k is types[k]
    ids: np.ndarray       # (tokens,) int32 local ids, pair after pair
    counts: np.ndarray    # (types,) int64 occurrences of each type
    first: np.ndarray     # (types,) int64 position in `ids` of each type's first occurrence
    lengths: np.ndarray   # (kept,) int32 tokens per kept pair


@dataclass
class ChunkIds:
    lines: int            # pairs read (kept or not)
    dropped_empty: int    # an empty side, before or after tokenization
    dropped_long: int     # a side over max_len units
    kept: np.ndarray      # (kept,) int64 index of each kept pair in the chunk
    src: SideIds
    tgt: SideIds


def local_ids(sentences: Sequence[Sequence[str]]) -> SideIds:
    """Sentences of units -> SideIds (types numbered in order of first appearance)."""
    types: dict[str, int] = {}
    total = sum(len(sentence) for sentence in sentences)
    ids = np.fromiter((types.setdefault(unit, len(types)) for sentence in sentences for unit in sentence),
                      dtype=np.int32, count=total)
    # ids are numbered as they first appear, so a type's first occurrence is where the running maximum grows
    grows = np.ones(total, dtype=bool)
    grows[1:] = np.diff(np.maximum.accumulate(ids)) > 0
    return SideIds(list(types), ids, np.bincount(ids, minlength=len(types)).astype(np.int64),
                   np.flatnonzero(grows).astype(np.int64),
                   np.fromiter((len(sentence) for sentence in sentences), dtype=np.int32, count=len(sentences)))


def encode_chunk(task: tuple[NmtText, int | None, list[str], list[str]]) -> ChunkIds:
    """Tokenize, filter and number one chunk: ``(text, max_len, src_lines, tgt_lines)`` -> ChunkIds."""
    text, max_len, src_lines, tgt_lines = task
    nonempty = [i for i, (s, t) in enumerate(zip(src_lines, tgt_lines)) if s.strip() and t.strip()]
    src_units = text.tokenize([src_lines[i] for i in nonempty], text.src_lang)
    tgt_units = text.tokenize([tgt_lines[i] for i in nonempty], text.tgt_lang)
    dropped = {"empty": len(src_lines) - len(nonempty), "long": 0}
    kept, src, tgt = [], [], []
    for i, s, t in zip(nonempty, src_units, tgt_units):
        verdict = pair_verdict(s, t, max_len)
        if verdict is None:
            kept.append(i)
            src.append(s)
            tgt.append(t)
        else:
            dropped[verdict] += 1
    return ChunkIds(len(src_lines), dropped["empty"], dropped["long"], np.asarray(kept, dtype=np.int64),
                    local_ids(src), local_ids(tgt))
