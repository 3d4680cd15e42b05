"""NMT data, end to end: parallel files -> Moses tokens or subwords -> vocabularies -> cached arrays -> batchers.

Usage: ``dataset = load_nmt_dataset(NmtDataConfig(train=".../europarl-fr-en/train", dev=".../europarl-fr-en/dev"))``;
``batches = dataset.train.batches()``; to score BLEU: ``hyps = [dataset.decode(ids) for ids in outputs]`` and
``sacrebleu.corpus_bleu(hyps, [dataset.dev_references])``; ``synthetic_nmt_dataset()`` for the fast default.

Training pairs longer than ``max_len`` units (Moses tokens, or pieces with subwords) on either side are dropped (paper:
50). Dev pairs are kept whatever their length (only empty ones are dropped), in file order, so that dev batch i holds
references ``i*B .. i*B+B-1``. References are the raw dev target lines (lowercased when ``lowercase``): BLEU is
scored on detokenized output against them. A corpus is prepared streamed, in bounded memory, into a cache entry
(data/streamed_nmt.py), and every load maps that entry's arrays: the second load of the same corpus and settings
reads nothing but its meta.json.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from .batching import NmtBatcher, ParallelData
from .cache import ArrayCache, read_entry
from .encoders import SIDES, NmtEncoder, NmtText
from .holdout import MIN_SPLIT_PAIRS, held_out_size  # noqa: F401 - part of this module's face
from .parallel import ParallelCorpus, parallel_files, read_parallel
from .streamed_nmt import nmt_text, prepare_nmt, preparation_bytes
from .subwords import MODEL_TYPES
from .synthetic import synthetic_parallel
from .vocab import Vocabulary


@dataclass
class NmtDataConfig:
    train: str = ""                  # prefix: "<dir>/train" finds train.fr[.xz] and train.en[.xz]
    dev: str | None = None           # dev prefix; None -> hold out a seeded dev_fraction of the pairs (held_out_size)
    src_lang: str = "fr"
    tgt_lang: str = "en"
    max_len: int | None = 50         # drop training pairs longer than this on either side (paper: 50)
    vocab_size: int = 15000          # most frequent units kept per side, others unk (paper: 15,000)
    min_freq: int = 1
    lowercase: bool = False
    subwords: str | None = None      # None (Moses words) | "bpe" | "unigram" (sentencepiece on raw text)
    subword_vocab_size: int = 8000
    train_limit: int | None = None   # read only the first N training lines (quick runs)
    dev_limit: int | None = None     # keep only the first N dev pairs
    dev_fraction: float = 0.1        # held-out share of the training pairs when dev is None
    dev_size: int = 3000             # at most this many held-out pairs when dev is None
    batch_size: int = 64
    eval_batch_size: int = 64
    seed: int = 0
    processes: int = 0               # tokenization processes; 0 -> all available CPUs
    cache: bool = True
    encoding: str = "utf-8"

    def __post_init__(self):
        if self.subwords is not None and self.subwords not in MODEL_TYPES:
            raise ValueError(f"subwords must be None or one of {MODEL_TYPES}, got {self.subwords!r}")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"max_len must be >= 1 or None, got {self.max_len}")
        for name in ("vocab_size", "min_freq", "subword_vocab_size", "dev_size", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("train_limit", "dev_limit"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}")
        if not 0.0 < self.dev_fraction < 1.0:
            raise ValueError(f"dev_fraction must be in (0, 1), got {self.dev_fraction}")
        if self.processes < 0:
            raise ValueError(f"processes must be >= 0, got {self.processes}")
        if self.src_lang == self.tgt_lang:
            raise ValueError(f"src_lang and tgt_lang must differ, both are {self.src_lang!r}")


@dataclass
class NmtEvalSet:
    """A held-out corpus encoded like the training data: a batcher in file order and the texts to score against."""
    batcher: NmtBatcher
    sources: list[str]     # raw source lines of the kept pairs
    references: list[str]  # raw target lines (lowercased when the task lowercases)
    counts: dict           # ParallelCorpus.counts(): total, kept, dropped_empty


@dataclass
class NmtDataset:
    """What an NMT run needs: batchers, the encoder (vocabularies, text <-> units) and dev texts for BLEU."""
    train: NmtBatcher
    dev: NmtBatcher
    encoder: NmtEncoder
    dev_sources: list[str]
    dev_references: list[str]
    info: dict = field(default_factory=dict)
    config: NmtDataConfig | None = None  # None: synthetic (whitespace tokens)

    @property
    def src_vocab(self) -> Vocabulary:
        return self.encoder.src_vocab

    @property
    def tgt_vocab(self) -> Vocabulary:
        return self.encoder.tgt_vocab

    @property
    def subword_models(self) -> dict[str, str]:
        return self.encoder.text.subword_models

    def decode(self, ids) -> str:
        """Target ids (a model's output; stops at eos, drops pad/bos) -> detokenized text."""
        return self.encoder.decode(ids)

    def tokenize(self, lines: Sequence[str], side: str = "src") -> list[list[str]]:
        """Raw lines -> the units this dataset's vocabularies hold (Moses tokens or pieces; lowercased as in training)."""
        if side not in SIDES:
            raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")
        text = self.encoder.text
        return text.tokenize(lines, text.src_lang if side == "src" else text.tgt_lang)

    def encode_source(self, lines: Sequence[str]) -> dict[str, torch.Tensor]:
        """Raw source lines -> ``{"src": (B, S), "src_mask": (B, S)}`` with eos appended, pad 0 (for translation)."""
        return self.encoder.encode_source(lines)

    def eval_set(self, prefix: str | os.PathLike, limit: int | None = None, batch_size: int | None = None,
                 encoding: str | None = None) -> NmtEvalSet:
        """Another held-out corpus (e.g. test, newstest2014) processed exactly like dev, in file order. Only empty
        pairs are dropped; ``limit`` reads the first N lines."""
        c, text = self.config, self.encoder.text
        corpus = read_parallel(prefix, text.src_lang, text.tgt_lang, None, text.tokenize,
                               encoding or (c.encoding if c else "utf-8"), limit)
        batcher = NmtBatcher(self.encoder.tensorize(corpus.src, corpus.tgt),
                             batch_size or (c.eval_batch_size if c else 64), shuffle=False)
        return NmtEvalSet(batcher, list(corpus.src_lines), text.prepare(corpus.tgt_lines), corpus.counts())

    def save(self, run_dir: str | os.PathLike) -> None:
        """Write the encoder (``vocab.src.json``, ``vocab.tgt.json``, ``text.json``, sentencepiece models) and
        ``data.json`` into a run folder."""
        self.encoder.save(run_dir)
        (Path(run_dir) / "data.json").write_text(json.dumps(self.info, indent=2, ensure_ascii=False), encoding="utf-8")


def build_nmt_dataset(train: ParallelCorpus, dev: ParallelCorpus, config: NmtDataConfig, text: NmtText,
                      info: dict | None = None) -> NmtDataset:
    """Vocabularies from the training side, tensorized sets and batchers (no cache, no file access)."""
    encoder = NmtEncoder(text, Vocabulary.build(train.src, config.vocab_size, config.min_freq),
                         Vocabulary.build(train.tgt, config.vocab_size, config.min_freq))
    info = dict(info or {}, train=train.counts(), dev=dev.counts())
    return _assemble(encoder.tensorize(train.src, train.tgt), encoder.tensorize(dev.src, dev.tgt), encoder,
                     list(dev.src_lines), text.prepare(dev.tgt_lines), config, info)


def _assemble(train_data, dev_data, encoder, sources, refs, config, info) -> NmtDataset:
    info = dict(info, src_vocab=len(encoder.src_vocab), tgt_vocab=len(encoder.tgt_vocab), train_pairs=len(train_data),
                dev_pairs=len(dev_data), train_src_tokens=int(train_data.src_offsets[-1]),
                train_tgt_tokens=int(train_data.tgt_offsets[-1]))
    return NmtDataset(NmtBatcher(train_data, config.batch_size, shuffle=True, seed=config.seed),
                      NmtBatcher(dev_data, config.eval_batch_size, shuffle=False, seed=config.seed),
                      encoder, sources, refs, info, None if config.train == "<synthetic>" else config)


def load_nmt_dataset(config: NmtDataConfig, cache: ArrayCache | None = None) -> NmtDataset:
    """Read, tokenize, filter, build and cache an NMT dataset from parallel files (streamed: data/streamed_nmt.py),
    then map its arrays. Raises CorpusError for bad input."""
    if not config.train:
        raise ValueError("NmtDataConfig.train: give a parallel corpus prefix such as <dir>/train")
    files = list(parallel_files(config.train, config.src_lang, config.tgt_lang))
    if config.dev:
        files += parallel_files(config.dev, config.src_lang, config.tgt_lang)
    cache = cache or ArrayCache(enabled=config.cache)
    settings = {k: v for k, v in asdict(config).items()
                if k not in ("batch_size", "eval_batch_size", "cache", "processes")}
    key = cache.key("nmt", files, settings)
    cached = cache.load(key, lambda arrays, meta, folder: _mapped(config, arrays, meta, folder, cached=True),
                        _bounds)
    if cached is not None:
        return cached
    folder, _ = cache.build(key, lambda folder: prepare_nmt(config, folder), need=preparation_bytes(files))
    return _mapped(config, *read_entry(folder), folder, cached=False)


def _bounds(meta: dict) -> tuple[dict[str, int], dict[str, str]]:
    """What a cached entry's arrays are checked against (data/cache.py's check_entry): each side's ids below its
    vocabulary's size, each offsets array of its ids."""
    parts = [(part, side) for part in ("train", "dev") for side in SIDES]
    sizes = {side: len(Vocabulary.from_dict(meta[f"{side}_vocab"])) for side in SIDES}
    return ({f"{part}.{side}": sizes[side] for part, side in parts},
            {f"{part}.{side}_offsets": f"{part}.{side}" for part, side in parts})


def _mapped(config: NmtDataConfig, arrays: dict, meta: dict, folder: Path, cached: bool) -> NmtDataset:
    """The dataset of an entry's mapped arrays (a KeyError or ValueError here means the entry is damaged:
    ArrayCache.load)."""
    vocabs = {side: Vocabulary.from_dict(meta[f"{side}_vocab"]) for side in SIDES}
    data = [ParallelData(*(arrays[f"{part}.{name}"] for name in ("src", "src_offsets", "tgt", "tgt_offsets")))
            for part in ("train", "dev")]
    text = nmt_text(config, {side: str(folder / f"spm.{side}.model") for side in meta["subword_sides"]})
    encoder = NmtEncoder(text, vocabs["src"], vocabs["tgt"])
    return _assemble(*data, encoder, meta["dev_sources"], meta["dev_references"], config,
                     dict(meta["info"], cached=cached))


def synthetic_nmt_dataset(num_train: int = 5000, num_dev: int = 200, seed: int = 0, batch_size: int = 32,
                       eval_batch_size: int = 64) -> NmtDataset:
    """The synthetic translation task (data.synthetic) as an NmtDataset; references are space-joined target words."""
    def corpus(pairs):
        src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
        return ParallelCorpus(src, tgt, [" ".join(s) for s in src], [" ".join(t) for t in tgt],
                              list(range(1, len(pairs) + 1)), total=len(pairs))
    config = NmtDataConfig(train="<synthetic>", src_lang="src", tgt_lang="tgt", max_len=None,
                           batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed)
    return build_nmt_dataset(corpus(synthetic_parallel(num_train, seed=seed)),
                             corpus(synthetic_parallel(num_dev, seed=seed + 1_000_003)), config,
                             NmtText("join", config.src_lang, config.tgt_lang),
                             {"train_path": "<synthetic>", "dev_path": "<synthetic>"})
