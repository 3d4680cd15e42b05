"""Tensorized corpora and deterministic batchers producing the batch dicts that the models' losses take.

Usage: ``batcher = NmtBatcher(ParallelData.tensorize(pairs, src_vocab, tgt_vocab), batch_size=64, seed=1)``
then ``batches = batcher.batches()`` (the training set handed to ``hogwild.train``) or ``for batch in batcher: ...``.

A corpus is held as flat integer numpy arrays plus sentence offsets (int64 in memory; the cache's are memory maps of
the smallest id dtype, data/mapped.py); a batcher turns a list of example indices into a small dict of CPU int64
tensors. A batcher forms its batches once: ``plan()`` is a pure function of the seed (training batchers group the
examples in a seeded order) or the file order (``shuffle=False``: held-out sets); ``flat_plan()`` is the same plan as
two index arrays, what data/batch_set.py's BatchSet hands the engine so that each worker builds its own batches from
the mapped arrays. Pickled, TaggedData and ParallelData name their mapped files instead of copying them. The order in
which the batches are trained, epoch after epoch, is the engine's alone (``hogwild.share.feed.epoch_order``): one
shuffling mechanism, which ``scripts/train_serial.py``'s serial loop follows too.

The batch contract (what ``models.pos_loss`` / ``models.nmt_loss`` read; every tensor on the CPU, int64 unless said):

POS batch:  ``words`` (B, T) word ids, pad 0; ``prefixes`` and ``suffixes`` (B, T, L) char ids with L = 10
            (``features.AFFIX_LENGTH``): the prefix RIGHT-padded, the suffix LEFT-padded with 0 (``data/features.py``);
            ``tags`` (B, T) tag ids, -100 (``IGNORE_INDEX``) at padding, never pad; ``lengths`` (B,) tokens per
            sentence (>= 1); ``tokens`` (int) the tags the loss counts (tags != -100). Sentences keep their order in
            the batch; T = max(lengths), or its bucket edge (below).
NMT batch:  ``src`` (B, S) source ids + eos, pad 0; ``src_mask`` (B, S) bool, True on real tokens; ``tgt`` (B, T)
            bos + target ids + eos, pad 0; ``tgt_mask`` (B, T) bool; ``tokens`` (int) the target tokens the loss
            predicts (tgt_mask[:, 1:].sum(): words + eos). The loss predicts tgt[:, 1:] from tgt[:, :-1].
Ids: every vocabulary has pad 0, unk 1, bos 2, eos 3 (``models/special_ids.py``); tag vocabularies pad 0 and unk 1 only.
Host-side fields: ``tokens`` is a plain int, not a tensor, so it stays on the host when the batch moves to a device
(``hogwild.worker.replica.move_batch``, ``models.host_fields.to_device``): the padded losses return it as their count
without reading the device. Code that cuts a batch's rows or lengths recomputes it.

Length buckets: with ``buckets`` (data/buckets.py's LengthBuckets, e.g. edges (8, 16, 24, 32, 48, 64)) a batcher pads
each batch's time dimensions (POS: T; NMT: S and T, each on its own) by that rule, so an epoch's batches fall into a
few fixed shapes: what a CUDA graph or a compiled step needs, one per shape. Off (None) by default: T = the batch's
own longest. ``padded_sizes`` reads every batch's rows and padded lengths from the offsets alone, and ``layout``
gives a batch of that shape with no data (meta tensors): how a BatchSet tells its shapes without building a batch.
``pad_lengths`` pads a built NMT batch by the same rule (a library user's list of batches).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from hogwild.models.special_ids import BOS, EOS, IGNORE_INDEX, PAD

from .buckets import LengthBuckets
from .features import AFFIX_LENGTH, affix_arrays
from .mapped import array_from_state, array_state
from .vocab import Vocabulary


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


class _Arrays:
    """Pickling of a dataclass of arrays: mapped files by name, other arrays as tensors (data/mapped.py)."""

    def __getstate__(self) -> dict:
        return {name: array_state(array) for name, array in self.__dict__.items()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({name: array_from_state(value) for name, value in state.items()})


@dataclass
class TaggedData(_Arrays):
    """A tagged corpus as arrays: token i of sentence s is row ``offsets[s] + i``."""
    words: np.ndarray     # (N,) word ids
    prefixes: np.ndarray  # (N, L) char ids, right-padded
    suffixes: np.ndarray  # (N, L) char ids, left-padded
    tags: np.ndarray      # (N,) tag ids
    offsets: np.ndarray   # (S + 1,) sentence starts, offsets[-1] == N

    def __post_init__(self):
        n = int(self.offsets[-1]) if len(self.offsets) else -1
        if not (len(self.words) == len(self.tags) == len(self.prefixes) == len(self.suffixes) == n):
            raise ValueError(f"inconsistent TaggedData arrays: offsets end at {n}, words {len(self.words)}, "
                             f"tags {len(self.tags)}, affixes {len(self.prefixes)}/{len(self.suffixes)}")

    @classmethod
    def tensorize(cls, sentences: Sequence[Sequence[tuple[str, str]]], words: Vocabulary, chars: Vocabulary,
                  tags: Vocabulary, affix_length: int = AFFIX_LENGTH) -> "TaggedData":
        tokens = [word for sentence in sentences for word, _ in sentence]
        labels = [label for sentence in sentences for _, label in sentence]
        prefixes, suffixes = affix_arrays(tokens, chars, affix_length)
        return cls(np.asarray(words.encode(tokens), dtype=np.int64), prefixes, suffixes,
                   np.asarray(tags.encode(labels), dtype=np.int64), _offsets([len(s) for s in sentences]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def arrays(self) -> dict[str, np.ndarray]:
        return {"words": self.words, "prefixes": self.prefixes, "suffixes": self.suffixes, "tags": self.tags,
                "offsets": self.offsets}


@dataclass
class ParallelData(_Arrays):
    """A parallel corpus as arrays of token ids (no bos/eos; the batcher adds them)."""
    src: np.ndarray          # (N_src,) source ids
    src_offsets: np.ndarray  # (P + 1,)
    tgt: np.ndarray          # (N_tgt,) target ids
    tgt_offsets: np.ndarray  # (P + 1,)

    def __post_init__(self):
        if len(self.src_offsets) != len(self.tgt_offsets):
            raise ValueError(f"{len(self.src_offsets) - 1} source vs {len(self.tgt_offsets) - 1} target sentences")
        if self.src_offsets[-1] != len(self.src) or self.tgt_offsets[-1] != len(self.tgt):
            raise ValueError("offsets do not match the id arrays")

    @classmethod
    def tensorize(cls, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_vocab: Vocabulary,
                  tgt_vocab: Vocabulary) -> "ParallelData":
        src = [tok for s, _ in pairs for tok in s]
        tgt = [tok for _, t in pairs for tok in t]
        return cls(np.asarray(src_vocab.encode(src), dtype=np.int64), _offsets([len(s) for s, _ in pairs]),
                   np.asarray(tgt_vocab.encode(tgt), dtype=np.int64), _offsets([len(t) for _, t in pairs]))

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"src": self.src, "src_offsets": self.src_offsets, "tgt": self.tgt, "tgt_offsets": self.tgt_offsets}


def ragged_rows(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, fill: int,
                column: int = 0) -> np.ndarray:
    """(B, width, *values.shape[1:]) int64 rows: row r holds ``values[starts[r]:starts[r] + lengths[r]]`` from
    ``column`` on and ``fill`` elsewhere; one gather from ``values`` (a memory map reads only those rows' pages)."""
    out = np.full((len(starts), width, *values.shape[1:]), fill, dtype=np.int64)
    positions = np.arange(width - column)
    filled = positions < lengths[:, None]  # (B, width - column)
    out[:, column:][filled] = values[(starts[:, None] + positions)[filled]]
    return out


def _meta(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A tensor of that shape and dtype holding no data (the meta device): a batch's layout."""
    return torch.empty(shape, dtype=dtype, device="meta")


class _Batcher:
    """Shared logic: ``plan`` (the batches as arrays of example indices) and ``batches`` (the batch dicts)."""

    RUN_CHUNK = 1 << 20  # examples read at a time by padded_sizes: memory bounded whatever the corpus size

    def __init__(self, size: int, batch_size: int, shuffle: bool, seed: int, buckets: LengthBuckets | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if size < 1:
            raise ValueError("cannot batch an empty corpus")
        self.size, self.batch_size, self.shuffle, self.seed = size, batch_size, shuffle, seed
        self.buckets = buckets

    def __len__(self) -> int:
        return math.ceil(self.size / self.batch_size)

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, 0])

    def flat_plan(self) -> tuple[np.ndarray, np.ndarray]:
        """The plan as ``(order, starts)``: batch i holds examples ``order[starts[i]:starts[i] + batch_size]`` (the
        run is shorter only where it reaches the end of ``order``). Here: with ``shuffle``, a seeded permutation cut
        into consecutive runs; else file order."""
        order = self._rng().permutation(self.size) if self.shuffle else np.arange(self.size)
        return order, np.arange(0, self.size, self.batch_size)

    def plan(self) -> list[np.ndarray]:
        """Example indices of each batch, in plan order (``flat_plan`` as a list of arrays)."""
        order, starts = self.flat_plan()
        return [order[start:start + self.batch_size] for start in starts]

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """The batch dicts in plan order, built as they are read."""
        for indices in self.plan():
            yield self.batch(indices)

    def batches(self) -> list[dict[str, torch.Tensor]]:
        """Every batch dict, in plan order: the fixed list a training run (engine or serial loop) trains on."""
        return list(self)

    def _padded(self, length: int) -> int:
        return length if self.buckets is None else self.buckets.length(length)

    def with_buckets(self, buckets: LengthBuckets | None) -> "_Batcher":
        """A copy of this batcher (the same data and plan) padding its batches by ``buckets``."""
        batcher = copy.copy(self)
        batcher.buckets = buckets
        return batcher

    def padded_sizes(self, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """(len(starts), 1 + k) int64: the rows and padded time lengths (POS: T; NMT: S, T) of the batch of examples
        ``order[start:start + batch_size]`` for each start (a multiple of batch_size, as ``flat_plan`` cuts them),
        read from the offsets alone: ``batch`` builds exactly these shapes."""
        size, n = self.batch_size, len(order)
        starts = np.asarray(starts, dtype=np.int64)
        if (starts % size).any():
            raise ValueError(f"padded_sizes: batch starts must be multiples of batch_size {size}")
        runs, step = [], size * max(1, self.RUN_CHUNK // size)  # whole runs of batch_size per chunk
        for begin in range(0, n, step):
            lengths = self.example_lengths(order[begin:begin + step])  # (m, k)
            runs.append(np.maximum.reduceat(lengths, np.arange(0, len(lengths), size), axis=0))
        longest = np.concatenate(runs)[starts // size]  # (B, k) each batch's longest, per time dimension
        padded = longest if self.buckets is None else self.buckets.lengths(longest)
        return np.column_stack([np.minimum(size, n - starts), padded]).astype(np.int64)

    def example_lengths(self, indices: np.ndarray) -> np.ndarray:
        """(len(indices), k) int64: each example's length in each time dimension of its batch, before padding."""
        raise NotImplementedError

    def layout(self, rows: int, *lengths: int) -> dict[str, torch.Tensor]:
        """A batch of ``rows`` examples padded to ``lengths`` as its meta tensors (dtypes and shapes, no data)."""
        raise NotImplementedError

    def batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class PosBatcher(_Batcher):
    """Batches of ``batch_size`` sentences (1 = the paper's one sentence per update), grouped in a seeded order;
    ``buckets``: pad T by them (module docstring)."""

    def __init__(self, data: TaggedData, batch_size: int = 1, shuffle: bool = True, seed: int = 0,
                 buckets: LengthBuckets | None = None):
        super().__init__(len(data), batch_size, shuffle, seed, buckets)
        self.data = data
        self.num_tokens = data.num_tokens

    def example_lengths(self, indices: np.ndarray) -> np.ndarray:
        return (self.data.offsets[indices + 1] - self.data.offsets[indices])[:, None].astype(np.int64)  # (n, 1): T

    def layout(self, rows: int, *lengths: int) -> dict[str, torch.Tensor]:
        (t,), affix = lengths, self.data.prefixes.shape[1]
        return {"words": _meta(rows, t), "prefixes": _meta(rows, t, affix), "suffixes": _meta(rows, t, affix),
                "tags": _meta(rows, t), "lengths": _meta(rows)}

    def batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        d = self.data
        indices = np.asarray(indices)
        starts = d.offsets[indices]
        lengths = d.offsets[indices + 1] - starts
        t = self._padded(int(lengths.max()))
        tags = ragged_rows(d.tags, starts, lengths, t, IGNORE_INDEX)  # (B, T)
        return {"words": torch.from_numpy(ragged_rows(d.words, starts, lengths, t, PAD)),  # (B, T)
                "prefixes": torch.from_numpy(ragged_rows(d.prefixes, starts, lengths, t, PAD)),  # (B, T, L)
                "suffixes": torch.from_numpy(ragged_rows(d.suffixes, starts, lengths, t, PAD)),  # (B, T, L)
                "tags": torch.from_numpy(tags), "lengths": torch.from_numpy(lengths.astype(np.int64)),
                "tokens": int((tags != IGNORE_INDEX).sum())}


class NmtBatcher(_Batcher):
    """Batches of ``batch_size`` pairs. With ``shuffle``, pairs are shuffled, cut into pools of ``pool_batches``
    batches and sorted by length inside each pool (little padding); the batches are then listed in a seeded order
    (so that no prefix of the list is all short or all long sentences). ``buckets``: pad S and T by them (module
    docstring)."""

    def __init__(self, data: ParallelData, batch_size: int = 64, shuffle: bool = True, seed: int = 0,
                 pool_batches: int = 100, buckets: LengthBuckets | None = None):
        super().__init__(len(data), batch_size, shuffle, seed, buckets)
        if pool_batches < 1:
            raise ValueError(f"pool_batches must be >= 1, got {pool_batches}")
        self.data, self.pool_batches = data, pool_batches
        self.num_tokens = int(data.tgt_offsets[-1] + len(data))  # target tokens incl. eos

    def flat_plan(self) -> tuple[np.ndarray, np.ndarray]:
        """With ``shuffle``: a seeded permutation cut into pools of ``pool_batches`` batches, each pool sorted by
        source then target length (stable: ties keep the permuted order), cut into consecutive runs of
        ``batch_size`` (a pool is whole batches, so the runs never straddle two pools), the runs listed in a second
        seeded order."""
        if not self.shuffle:
            return super().flat_plan()
        rng = self._rng()
        order = rng.permutation(self.size)
        d, size = self.data, self.batch_size * self.pool_batches
        for start in range(0, self.size, size):  # pool by pool: nothing else of the corpus' size is held
            pool = order[start:start + size]
            src_len = d.src_offsets[pool + 1] - d.src_offsets[pool]
            tgt_len = d.tgt_offsets[pool + 1] - d.tgt_offsets[pool]
            key = src_len * (int(tgt_len.max()) + 1) + tgt_len  # by source, then target length
            key = key.astype(np.min_scalar_type(int(key.max())))  # 16 bits or fewer: a radix sort in numpy
            order[start:start + size] = pool[np.argsort(key, kind="stable")]
        starts = np.arange(0, self.size, self.batch_size)
        return order, starts[rng.permutation(len(starts))]

    def example_lengths(self, indices: np.ndarray) -> np.ndarray:
        d = self.data
        src = d.src_offsets[indices + 1] - d.src_offsets[indices] + 1  # ids + eos
        tgt = d.tgt_offsets[indices + 1] - d.tgt_offsets[indices] + 2  # bos + ids + eos
        return np.column_stack([src, tgt]).astype(np.int64)  # (n, 2): S, T

    def layout(self, rows: int, *lengths: int) -> dict[str, torch.Tensor]:
        s, t = lengths
        return {"src": _meta(rows, s), "src_mask": _meta(rows, s, dtype=torch.bool), "tgt": _meta(rows, t),
                "tgt_mask": _meta(rows, t, dtype=torch.bool)}

    def batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        d = self.data
        indices = np.asarray(indices)
        src_start, tgt_start = d.src_offsets[indices], d.tgt_offsets[indices]
        src_len, tgt_len = d.src_offsets[indices + 1] - src_start, d.tgt_offsets[indices + 1] - tgt_start
        rows = np.arange(len(indices))
        src = ragged_rows(d.src, src_start, src_len, self._padded(int(src_len.max()) + 1), PAD)  # (B, S)
        src[rows, src_len] = EOS  # ids + eos
        tgt = ragged_rows(d.tgt, tgt_start, tgt_len, self._padded(int(tgt_len.max()) + 2), PAD, 1)  # (B, T)
        tgt[:, 0] = BOS  # bos + ids + eos
        tgt[rows, tgt_len + 1] = EOS
        src_t, tgt_t = torch.from_numpy(src), torch.from_numpy(tgt)
        return {"src": src_t, "src_mask": src_t != PAD, "tgt": tgt_t, "tgt_mask": tgt_t != PAD,
                "tokens": int(tgt_len.sum()) + len(indices)}  # words + eos


def pad_lengths(batch: dict[str, torch.Tensor], multiple: int) -> dict[str, torch.Tensor]:
    """A built NMT batch whose source and target lengths (S, T) are padded up to multiples of ``multiple`` (pad 0,
    masks False), as a batcher with ``LengthBuckets(multiple=multiple)`` builds it. The loss and its gradients stay
    the same up to rounding: the encoder, the attention and the loss mask the padding out, and the decoder is causal
    (padded target steps come after every real one); the extra steps cost compute."""
    buckets = LengthBuckets(multiple=multiple)
    padded = dict(batch)
    for tokens, mask in (("src", "src_mask"), ("tgt", "tgt_mask")):
        length = batch[tokens].shape[1]
        extra = buckets.length(length) - length
        if extra:
            padded[tokens] = torch.nn.functional.pad(batch[tokens], (0, extra), value=PAD)
            padded[mask] = torch.nn.functional.pad(batch[mask], (0, extra), value=False)
    return padded
