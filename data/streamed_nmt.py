"""Streamed NMT preparation: parallel files of any size -> a cache entry of memory-mapped id arrays, the parent's
memory bounded by the corpus' distinct units (its types) and a few chunks, not by the corpus.

Usage: ``meta = prepare_nmt(config, folder)`` writes ``train.src.npy``, ``train.src_offsets.npy``, ... ``dev.tgt.npy``
(and the sentencepiece models) into ``folder`` (data/cache.py's ArrayCache.build gives it) and returns the entry's meta.

The steps (the in-memory pipeline this replaces gave the same arrays, vocabularies, dev split and counts:
tests/data/test_reference_data.py holds it to the values recorded from it):
1. read both files a chunk of CHUNK_PAIRS pairs at a time (data/parallel.py's parallel_chunks);
2. encode each chunk in a spawn pool (data/chunk_ids.py: tokenize, drop empty and long pairs, number each side's
   units), both sides in one task, at most IN_FLIGHT chunks per process submitted ahead; a corpus of at most
   POOL_PAIRS pairs is encoded in this process instead (a pool takes seconds to start);
3. map each chunk's types to provisional ids (numbered in order of first appearance, with counts and first
   positions: TypeTable) and append the ids, lengths and line numbers to files in the folder;
4. without a dev corpus, hold out the seeded pairs (data/holdout.py), count their units apart and read their raw
   lines back from the corpus;
5. rank each side's units by their count in the training pairs, then by first appearance there (Counter's order),
   into a vocabulary of at most vocab_size;
6. write the ids mapped to vocabulary ids, train and dev apart, as .npy arrays of the smallest dtype
   (data/mapped.py) with int64 offsets, a block of BLOCK_PAIRS pairs at a time; remove the provisional files.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from hogwild._lifeline import die_with_parent

from .chunk_ids import ChunkIds, SideIds, encode_chunk
from .compressed import numbered_lines, strip_compression
from .encoders import SIDES, NmtText
from .errors import CorpusError
from .holdout import held_out_mask, held_out_size
from .mapped import NpyWriter, RawWriter, id_dtype, read_raw
from .moses import default_processes
from .parallel import parallel_chunks, parallel_files
from .subwords import SubwordModel
from .vocab import Vocabulary

CHUNK_PAIRS = 5_000     # pairs per pool task (under encoders._POOL_LINES: a task tokenizes in its own process)
POOL_PAIRS = 20_000     # a corpus up to this size is encoded here: a spawn pool costs seconds to start
IN_FLIGHT = 2           # chunks per pool process submitted ahead of the one being merged
BLOCK_PAIRS = 100_000   # pairs per block when the provisional files are read back
ID, LENGTH, LINE = np.dtype(np.int32), np.dtype(np.int32), np.dtype(np.int64)  # provisional files' dtypes


class TypeTable:
    """One side's types seen so far: provisional id (order of first appearance) -> count and first position, both
    over the counted (training) corpus."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.counts = np.zeros(0, dtype=np.int64)
        self.first = np.zeros(0, dtype=np.int64)
        self.tokens = 0  # counted tokens so far: the next one's position

    def merge(self, side: SideIds, counted: bool) -> np.ndarray:
        """The chunk's tokens as provisional ids (int32); a counted chunk adds its counts and first positions."""
        before = len(self.ids)
        mapping = np.fromiter((self.ids.setdefault(unit, len(self.ids)) for unit in side.types), dtype=np.int64,
                              count=len(side.types))
        if len(self.ids) > len(self.counts):  # grow by doubling: amortized O(1) per type
            size = max(len(self.ids), 2 * len(self.counts))
            self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts), np.int64)])
            self.first = np.concatenate([self.first, np.zeros(size - len(self.first), np.int64)])
        if counted:
            new = mapping >= before
            self.first[mapping[new]] = self.tokens + side.first[new]
            self.counts[mapping] += side.counts
            self.tokens += len(side.ids)
        return mapping[side.ids].astype(ID)

    def types(self) -> list[str]:
        return list(self.ids)


class ChunkEncoder:
    """Encodes chunks in order: in this process for a small corpus, else over one spawn pool (started by the first
    corpus that needs it, shared by the next; spawn, not fork: the parent may hold torch threads)."""

    def __init__(self, text: NmtText, processes: int):
        self.text, self.processes, self.pool = text, processes, None

    def __enter__(self) -> "ChunkEncoder":
        return self

    def __exit__(self, *exc) -> None:
        """The pool's processes finish the chunks in flight (a second or two) and exit: terminating them instead (a
        SIGTERM each) could end one while it held the pool's task queue lock, waiting for its next chunk, and
        Pool.terminate then waits on that lock for good (as after a SIGTERM to the whole process group)."""
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool.terminate()  # the pool's threads; its processes have exited

    def encode(self, chunks: Iterator[tuple[list[str], list[str]]], max_len: int | None) \
            -> Iterator[tuple[list[str], list[str], ChunkIds]]:
        head = list(itertools.islice(chunks, POOL_PAIRS // CHUNK_PAIRS + 1))  # more than POOL_PAIRS: the pool
        if self.pool is None and (self.processes == 1 or len(head) <= POOL_PAIRS // CHUNK_PAIRS):
            for src, tgt in itertools.chain(head, chunks):
                yield src, tgt, encode_chunk((self.text, max_len, src, tgt))
            return
        if self.pool is None:
            self.pool = _start_pool(self.processes)
        pending: deque = deque()
        for src, tgt in itertools.chain(head, chunks):
            pending.append((src, tgt, self.pool.apply_async(encode_chunk, ((self.text, max_len, src, tgt),))))
            if len(pending) > IN_FLIGHT * self.processes:
                src, tgt, result = pending.popleft()
                yield src, tgt, result.get()
        while pending:
            src, tgt, result = pending.popleft()
            yield src, tgt, result.get()


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # this process's to act on: Ctrl-C, kill, hang-up


def _start_pool(processes: int):
    """A spawn pool whose processes die with this one (kill -9: no BrokenPipeError traceback from each as it sends a
    result to no one) and leave the stopping signals to it (a terminal sends SIGINT and SIGHUP to the whole process
    group, `kill -- -PGID` SIGTERM: no KeyboardInterrupt traceback from each, no process killed while it holds the
    pool's queue); this process stops and closes the pool. The signals are blocked while they start, so that none
    takes one in the seconds of its imports."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING_SIGNALS)
    try:
        return multiprocessing.get_context("spawn").Pool(processes, _pool_process, (os.getpid(),))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _pool_process(parent: int) -> None:
    """What each process of the pool runs first (the mask it inherited holds the stopping signals blocked)."""
    die_with_parent(parent)
    for number in STOPPING_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING_SIGNALS)


@dataclass
class Streamed:
    """A corpus after step 3: provisional files `<name>.<side>.ids`, `<name>.<side>.len`, `<name>.lines`."""
    folder: Path
    name: str
    pairs: int = 0
    total: int = 0
    dropped_empty: int = 0
    dropped_long: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    raw: list[tuple[str, str]] = field(default_factory=list)  # kept pairs' raw lines, when asked to keep them

    def path(self, kind: str, side: str = "") -> Path:
        return self.folder / ".".join(part for part in (self.name, side, kind) if part)

    def counts(self, held_out: int = 0) -> dict[str, int]:
        return {"total": self.total, "kept": self.pairs - held_out, "dropped_empty": self.dropped_empty,
                "dropped_long": self.dropped_long, "held_out": held_out}

    def blocks(self) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """(first pair, lengths per side, provisional ids per side) a block of pairs at a time."""
        token = {side: 0 for side in SIDES}
        for start in range(0, self.pairs, BLOCK_PAIRS):
            stop = min(start + BLOCK_PAIRS, self.pairs)
            lengths = {side: read_raw(self.path("len", side), LENGTH, start, stop) for side in SIDES}
            ids = {}
            for side in SIDES:
                end = token[side] + int(lengths[side].sum())
                ids[side] = read_raw(self.path("ids", side), ID, token[side], end)
                token[side] = end
            yield start, lengths, ids

    def remove(self) -> None:
        for kind, side in [("lines", "")] + [(kind, side) for kind in ("ids", "len") for side in SIDES]:
            self.path(kind, side).unlink(missing_ok=True)


def stream(encoder: ChunkEncoder, prefix: str, config, tables: dict[str, TypeTable], folder: Path, name: str,
           max_len: int | None, limit: int | None, counted: bool, keep_raw: bool) -> Streamed:
    """Steps 1-3 for one corpus: its provisional files in `folder`, its counts (and its kept raw lines)."""
    done = Streamed(folder, name)
    writers = {(kind, side): RawWriter(done.path(kind, side), dtype)
               for kind, dtype in (("ids", ID), ("len", LENGTH)) for side in SIDES}
    writers["lines", ""] = RawWriter(done.path("lines"), LINE)
    chunks = parallel_chunks(prefix, config.src_lang, config.tgt_lang, config.encoding, limit, CHUNK_PAIRS)
    try:
        for src, tgt, chunk in encoder.encode(chunks, max_len):
            writers["lines", ""].write(done.total + 1 + chunk.kept)  # 1-based line numbers of the kept pairs
            for side in SIDES:
                ids = getattr(chunk, side)
                writers["ids", side].write(tables[side].merge(ids, counted))
                writers["len", side].write(ids.lengths)
            if keep_raw:
                done.raw += [(src[i], tgt[i]) for i in chunk.kept]
            done.total += chunk.lines
            done.pairs += len(chunk.kept)
            done.dropped_empty += chunk.dropped_empty
            done.dropped_long += chunk.dropped_long
    finally:
        for writer in writers.values():
            writer.close()
    done.tokens = {side: writers["ids", side].written for side in SIDES}
    if not done.pairs:
        raise CorpusError(f"no pairs left after filtering ({done.counts()})",
                          path=parallel_files(prefix, config.src_lang, config.tgt_lang)[0])
    return done


@dataclass
class HeldOut:
    """Step 4's held-out pairs of a streamed corpus: their provisional ids and line numbers, and what they change in
    the training counts."""
    ids: dict[str, list[np.ndarray]]        # per side, each held-out pair's provisional ids, in corpus order
    lines: np.ndarray                       # (held out,) their 1-based line numbers
    counts: dict[str, np.ndarray]           # per side, each type's count in the held-out pairs
    first: dict[str, np.ndarray]            # per side, each type's first position in the training pairs


def hold_out(train: Streamed, is_dev: np.ndarray, tables: dict[str, TypeTable]) -> HeldOut:
    """One pass over the provisional files: the held-out pairs' ids and line numbers, their counts, and where a type
    first seen in a held-out pair is first seen in the training pairs (every other type: its first position)."""
    first = {side: tables[side].first.copy() for side in SIDES}
    pending = {side: np.zeros(len(tables[side].counts), dtype=bool) for side in SIDES}
    held = HeldOut({side: [] for side in SIDES}, np.zeros(0, LINE), {}, first)
    position = {side: 0 for side in SIDES}
    for start, lengths, ids in train.blocks():
        dev = is_dev[start:start + len(lengths["src"])]
        for side in SIDES:
            offsets = np.concatenate([[0], np.cumsum(lengths[side], dtype=np.int64)])
            in_dev = np.repeat(dev, lengths[side])
            positions = position[side] + np.arange(len(ids[side]))
            # a type whose first occurrence is a held-out token: its first training occurrence comes later
            starts_here = in_dev & (tables[side].first[ids[side]] == positions)
            pending[side][ids[side][starts_here]] = True
            train_tokens = np.flatnonzero(~in_dev & pending[side][ids[side]])
            types, where = np.unique(ids[side][train_tokens], return_index=True)
            first[side][types] = positions[train_tokens[where]]
            pending[side][types] = False
            held.ids[side] += [ids[side][offsets[row]:offsets[row + 1]].copy() for row in np.flatnonzero(dev)]
            position[side] += len(ids[side])
    rows = np.flatnonzero(is_dev)
    held.lines = np.concatenate([read_raw(train.path("lines"), LINE, row, row + 1) for row in rows])
    for side in SIDES:
        tokens = np.concatenate(held.ids[side]) if held.ids[side] else np.zeros(0, ID)
        held.counts[side] = np.bincount(tokens, minlength=len(tables[side].counts))
    return held


def raw_lines(prefix: str, config, numbers: np.ndarray) -> list[tuple[str, str]]:
    """The raw (src, tgt) lines at the given sorted 1-based line numbers, read back from the corpus files (only
    those lines decoded; each file read up to the last of them)."""
    wanted, last = {int(n) for n in numbers}, int(numbers[-1])
    sides = []
    for path in parallel_files(prefix, config.src_lang, config.tgt_lang):
        lines = {}
        for number, line in numbered_lines(path, config.encoding, only=wanted):
            lines[number] = line
            if number == last:
                break
        sides.append(lines)
    return [(sides[0][int(n)], sides[1][int(n)]) for n in numbers]


def write_arrays(folder: Path, name: str, blocks: Iterator[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
                 remap: dict[str, np.ndarray], tokens: dict[str, int], pairs: int) -> None:
    """Step 6 for one part: `blocks` yields (lengths, provisional ids) per side; `tokens` and `pairs` are the totals
    they add up to (the .npy headers are written first)."""
    ids = {side: NpyWriter(folder / f"{name}.{side}.npy", remap[side].dtype, tokens[side]) for side in SIDES}
    offsets = {side: NpyWriter(folder / f"{name}.{side}_offsets.npy", np.int64, pairs + 1) for side in SIDES}
    end = {side: 0 for side in SIDES}
    for side in SIDES:
        offsets[side].write(np.zeros(1, np.int64))
    for lengths, provisional in blocks:
        for side in SIDES:
            ids[side].write(remap[side][provisional[side]])
            offsets[side].write(end[side] + np.cumsum(lengths[side], dtype=np.int64))
            end[side] += int(np.sum(lengths[side], dtype=np.int64))
    for writer in (*ids.values(), *offsets.values()):
        writer.close()


def preparation_bytes(paths: list[Path]) -> int:
    """Bytes a streamed preparation of these files writes at least: its provisional ids alone, 4 bytes a token, a
    token for at most 8 bytes of text (Europarl: 7.3), a compressed file counted as 3 times its size (Europarl's xz
    files hold 5). The folder's peak is higher, the final arrays written beside the provisional ones: 552 MB for
    2M Europarl pairs (134 MB of xz), for which this gives 200 MB."""
    compressed = sum(path.stat().st_size for path in paths if strip_compression(path.name) != path.name)
    plain = sum(path.stat().st_size for path in paths) - compressed
    return (plain + 3 * compressed) // 2


def prepare_nmt(config, folder: Path) -> dict:
    """Steps 1-6 for an NmtDataConfig (data/nmt_dataset.py), written into `folder`; returns the entry's meta."""
    models = train_subwords(config, folder) if config.subwords else {}
    text = nmt_text(config, models)
    tables = {side: TypeTable() for side in SIDES}
    processes = config.processes or default_processes()
    with ChunkEncoder(text, processes) as encoder:
        train = stream(encoder, config.train, config, tables, folder, "train", config.max_len, config.train_limit,
                       counted=True, keep_raw=False)
        dev = None if not config.dev else stream(encoder, config.dev, config, tables, folder, "dev", None,
                                                 config.dev_limit, counted=False, keep_raw=True)
    if dev is None:
        try:
            size = held_out_size(train.pairs, config.dev_fraction, config.dev_size)
        except ValueError as error:
            raise CorpusError(f"{error}; give a held-out corpus with --dev, or a larger --train",
                              path=parallel_files(config.train, config.src_lang, config.tgt_lang)[0],
                              option="dev") from None
        is_dev = held_out_mask(train.pairs, size / train.pairs, config.seed)
        held = hold_out(train, is_dev, tables)
        dev_raw = raw_lines(config.train, config, held.lines)
        train_counts, dev_counts = train.counts(int(is_dev.sum())), {"total": len(dev_raw), "kept": len(dev_raw),
                                                                    "dropped_empty": 0, "dropped_long": 0,
                                                                    "held_out": 0}
    else:
        is_dev, held, dev_raw = None, None, dev.raw
        train_counts, dev_counts = train.counts(), dev.counts()
    vocabs = {}
    for side in SIDES:
        table = tables[side]
        counts = table.counts - held.counts[side] if held else table.counts
        first = held.first[side] if held else table.first
        vocabs[side] = Vocabulary.from_arrays(table.types(), counts, first, config.vocab_size, config.min_freq)
    remap = {side: _remap(tables[side], vocabs[side]) for side in SIDES}
    _write_parts(folder, train, dev, is_dev, held, remap)
    return {"info": {"train_path": str(config.train), "dev_path": config.dev, "train": train_counts,
                     "dev": dev_counts},
            "src_vocab": vocabs["src"].to_dict(), "tgt_vocab": vocabs["tgt"].to_dict(),
            "dev_sources": [src for src, _ in dev_raw], "dev_references": text.prepare([tgt for _, tgt in dev_raw]),
            "subword_sides": sorted(models)}


def _remap(table: TypeTable, vocab: Vocabulary) -> np.ndarray:
    """Provisional id -> vocabulary id (unk for a type left out), in the vocabulary's smallest dtype."""
    return np.fromiter((vocab.index(unit) for unit in table.ids), dtype=id_dtype(len(vocab)), count=len(table.ids))


def _write_parts(folder: Path, train: Streamed, dev: Streamed | None, is_dev: np.ndarray | None,
                 held: HeldOut | None, remap: dict[str, np.ndarray]) -> None:
    """Step 6: the train arrays (held-out pairs left out), the dev arrays, and no provisional file left."""
    def train_blocks():
        for start, lengths, ids in train.blocks():
            if is_dev is None:
                yield lengths, ids
                continue
            keep = ~is_dev[start:start + len(lengths["src"])]
            yield ({side: lengths[side][keep] for side in SIDES},
                   {side: ids[side][np.repeat(keep, lengths[side])] for side in SIDES})

    held_tokens = {side: sum(len(ids) for ids in held.ids[side]) if held else 0 for side in SIDES}
    dev_pairs = len(held.lines) if held else 0
    write_arrays(folder, "train", train_blocks(), remap, {side: train.tokens[side] - held_tokens[side]
                                                          for side in SIDES}, train.pairs - dev_pairs)
    if held is not None:
        blocks = [({side: np.array([len(ids) for ids in held.ids[side]], LENGTH) for side in SIDES},
                   {side: np.concatenate(held.ids[side]) for side in SIDES})]
        write_arrays(folder, "dev", iter(blocks), remap, held_tokens, dev_pairs)
    else:
        write_arrays(folder, "dev", (block[1:] for block in dev.blocks()), remap, dev.tokens, dev.pairs)
        dev.remove()
    train.remove()


def train_subwords(config, folder: Path) -> dict[str, str]:
    """One sentencepiece model per side, trained on the training text read line by line (the first train_limit
    lines, lowercased with lowercase), written as `spm.<side>.model` into `folder`: side -> path."""
    def lines(path: Path) -> Iterator[str]:
        for number, line in numbered_lines(path, config.encoding):
            if config.train_limit is not None and number > config.train_limit:
                return
            yield line.lower() if config.lowercase else line

    paths = parallel_files(config.train, config.src_lang, config.tgt_lang)
    return {side: str(SubwordModel.train(lines(path), folder / f"spm.{side}", config.subword_vocab_size,
                                         config.subwords).path) for side, path in zip(SIDES, paths)}


def nmt_text(config, models: dict[str, str]) -> NmtText:
    """How an NmtDataConfig turns text into units: sentencepiece models (side -> path) when given, else Moses."""
    return NmtText("subwords" if config.subwords else "moses", config.src_lang, config.tgt_lang, config.lowercase,
                   models, config.processes)
