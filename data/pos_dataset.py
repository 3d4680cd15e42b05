"""POS tagging data, end to end: corpus -> vocabularies -> tensorized train/dev sets -> batchers (cached on disk).

Usage: ``dataset = load_pos_dataset(PosDataConfig(train="../shared/corpora/brown"))``;
``batches = dataset.train.batches()``; ``dataset.dev`` for accuracy; ``synthetic_pos_dataset()`` for a fast
default.

Words seen fewer than ``word_min_freq`` times in the training set become unk: by default 2 (``WORD_MIN_FREQ``: words
seen once are unk, and they are what trains the unk vector that unknown words get at test time), the POS paper's 10
(``PAPER_WORD_MIN_FREQ``, sized for its 40k-sentence TIGER corpus) with the paper recipe. Characters seen fewer than
``char_min_freq`` (2, i.e. seen once) times become unk, as in the paper. Tags seen only in dev map to the tag
vocabulary's unk (1), so they count as errors. When no dev corpus is given, a seeded ``dev_fraction`` of the training
corpus is held out (:func:`split_sentences`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .batching import PosBatcher, TaggedData
from .cache import ArrayCache, read_entry
from .encoders import PosEncoder
from .features import AFFIX_LENGTH
from .holdout import split_sentences
from .mapped import id_dtype
from .readers import FORMATS, TAGS, TaggedSentence, corpus_files, read_tagged
from .synthetic import synthetic_tagged
from .vocab import TAG_SPECIALS, Vocabulary

# Measured on ud-german-lit (1,728 training sentences after the seeded 10% split; UPOS): words kept / share of dev
# tokens that are unk at min_freq 1: 6,887 / 13.2%, 2: 2,549 / 18.4%, 10: 397 / 33.5%; on Brown (51,606 sentences):
# 2: 28,775 / 4.0%, 10: 8,296 / 10.4%. At 10 a small corpus leaves a third of its dev tokens to the character model
# (the 2,200-sentence treebank: 76% dev accuracy, 59% on unknown words); 2 keeps every word the model sees
# twice, and its singletons (12% of ud-german-lit's training tokens, 2.4% of Brown's) train the unk vector (min_freq 1
# would leave it untrained).
WORD_MIN_FREQ = 2
PAPER_WORD_MIN_FREQ = 10  # the POS paper (TIGER, ~40k training sentences)
SYNTHETIC_WORD_MIN_FREQ = 10  # the synthetic task: keeps its 5 frequent words, the rest is tagged from characters


@dataclass
class PosDataConfig:
    train: str = ""                # tagged corpus: a file or a folder (e.g. brown/)
    dev: str | None = None         # held-out corpus; None -> seeded split of train
    format: str = "auto"           # "auto" | "conllu" | "conll" | "slash"
    tag: str | None = None         # None (format's main tag) | "upos" | "xpos" | "xpos+feats"
    word_column: int | None = None  # conll format: 1-based columns (None: the layout's default)
    tag_column: int | None = None
    separator: str = "/"           # slash format: word/TAG split at the last separator
    encoding: str = "utf-8"
    word_min_freq: int = WORD_MIN_FREQ  # words seen fewer times in train -> unk (paper: 10)
    char_min_freq: int = 2         # chars seen fewer times in train -> unk (paper: seen once -> unk)
    max_words: int | None = None   # cap on the word vocabulary (most frequent first)
    affix_length: int = AFFIX_LENGTH
    dev_fraction: float = 0.1      # held-out share when dev is None
    batch_size: int = 1            # sentences per training batch (paper: 1)
    eval_batch_size: int = 32      # sentences per dev batch
    seed: int = 0                  # split and batch order
    cache: bool = True             # use the on-disk cache ($HOGWILD_CACHE)

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.tag is not None and self.tag not in TAGS:
            raise ValueError(f"tag must be None or one of {TAGS}, got {self.tag!r}")
        for name in ("word_min_freq", "char_min_freq", "affix_length", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.dev_fraction < 1.0:
            raise ValueError(f"dev_fraction must be in (0, 1), got {self.dev_fraction}")

    def read(self, path: str | os.PathLike) -> list[TaggedSentence]:
        """A tagged corpus (file or folder) read with these settings: training, dev and test sets alike."""
        return read_tagged(path, self.format, self.tag, word_column=self.word_column, tag_column=self.tag_column,
                           separator=self.separator, encoding=self.encoding)


@dataclass
class PosDataset:
    """What a POS run needs: batchers, vocabularies (``len(tags)`` = output classes) and corpus statistics."""
    train: PosBatcher
    dev: PosBatcher
    words: Vocabulary
    chars: Vocabulary
    tags: Vocabulary
    info: dict = field(default_factory=dict)
    config: PosDataConfig | None = None  # how the corpora were read (None: synthetic)

    @property
    def encoder(self) -> PosEncoder:
        """The vocabularies as the one encoder of text (data/encoders.py): training, held-out and new sentences."""
        return PosEncoder(self.words, self.chars, self.tags, self.config.affix_length if self.config else AFFIX_LENGTH)

    def eval_set(self, path: str | os.PathLike, batch_size: int | None = None) -> PosBatcher:
        """Another tagged corpus (e.g. a test set) read like the training one (format, tag, columns, separator,
        encoding) and encoded with this dataset's vocabularies, batched in file order."""
        c = self.config or PosDataConfig(train="<synthetic>")
        return PosBatcher(self.encoder.tensorize(c.read(path)), batch_size or c.eval_batch_size, shuffle=False)

    def encode_sentences(self, sentences: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:
        """Untagged, tokenized sentences -> one POS batch (data/batching.py) with every tag -100 (for tagging text)."""
        return self.encoder.encode_sentences(sentences)

    def save(self, run_dir: str | os.PathLike) -> None:
        """Write ``vocab.words.json``, ``vocab.chars.json``, ``vocab.tags.json`` and ``data.json`` into a run folder."""
        self.encoder.save(run_dir)
        (Path(run_dir) / "data.json").write_text(json.dumps(self.info, indent=2, ensure_ascii=False), encoding="utf-8")


def build_pos_dataset(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence], config: PosDataConfig,
                   info: dict | None = None) -> PosDataset:
    """Vocabularies from ``train``, tensorized train and dev sets, batchers (no cache, no file access)."""
    encoder = PosEncoder(Vocabulary.build(([w for w, _ in s] for s in train), config.max_words, config.word_min_freq),
                         Vocabulary.build((w for s in train for w, _ in s), None, config.char_min_freq),
                         Vocabulary.build(([t for _, t in s] for s in train), specials=TAG_SPECIALS),
                         config.affix_length)
    return _assemble(encoder.tensorize(train), encoder.tensorize(dev), encoder.words, encoder.chars, encoder.tags,
                     config, info or {})


def _assemble(train_data, dev_data, words, chars, tags, config, info) -> PosDataset:
    info = dict(info, train_sentences=len(train_data), dev_sentences=len(dev_data),
                train_tokens=train_data.num_tokens, dev_tokens=dev_data.num_tokens,
                words=len(words), chars=len(chars), tags=len(tags),
                dev_unk_word_rate=float(np.mean(dev_data.words == 1)) if dev_data.num_tokens else 0.0)
    return PosDataset(PosBatcher(train_data, config.batch_size, shuffle=True, seed=config.seed),
                   PosBatcher(dev_data, config.eval_batch_size, shuffle=False, seed=config.seed),
                   words, chars, tags, info, None if config.train == "<synthetic>" else config)


def load_pos_dataset(config: PosDataConfig, cache: ArrayCache | None = None) -> PosDataset:
    """Read, split, build and cache a POS dataset from real corpora. Raises CorpusError for bad input."""
    if not config.train:
        raise ValueError("PosDataConfig.train: give a tagged corpus path")
    files = corpus_files(config.train) + (corpus_files(config.dev) if config.dev else [])
    cache = cache or ArrayCache(enabled=config.cache)
    settings = {k: v for k, v in asdict(config).items() if k not in ("batch_size", "eval_batch_size", "cache")}
    key = cache.key("pos", files, settings)
    cached = cache.load(key, lambda arrays, meta, _: _cached(config, arrays, meta, cached=True), _bounds)
    if cached is not None:
        return cached
    sentences = config.read(config.train)
    if config.dev:
        train, dev = sentences, config.read(config.dev)
    else:
        train, dev = split_sentences(sentences, config.dev_fraction, config.seed)
    dataset = build_pos_dataset(train, dev, config, {"train_path": str(config.train), "dev_path": config.dev})
    sizes = {"words": len(dataset.words), "tags": len(dataset.tags), "prefixes": len(dataset.chars),
             "suffixes": len(dataset.chars)}
    arrays = {f"{part}.{name}": array.astype(id_dtype(sizes[name])) if name in sizes else array
              for part, batcher in (("train", dataset.train), ("dev", dataset.dev))
              for name, array in batcher.data.arrays().items()}
    folder = cache.store(key, arrays, {"info": dataset.info, "words": dataset.words.to_dict(),
                                       "chars": dataset.chars.to_dict(), "tags": dataset.tags.to_dict()})
    if folder is not None:  # the stored arrays, mapped: what a warm start and the workers read
        return _cached(config, *read_entry(folder), cached=False)
    dataset.info["cached"] = False
    return dataset


def _bounds(meta: dict) -> tuple[dict[str, int], dict[str, str]]:
    """What a cached entry's arrays are checked against (data/cache.py's check_entry): word, character and tag ids
    below their vocabulary's size, each offsets array of its words."""
    sizes = {name: len(Vocabulary.from_dict(meta[vocab])) for name, vocab in
             (("words", "words"), ("prefixes", "chars"), ("suffixes", "chars"), ("tags", "tags"))}
    parts = ("train", "dev")
    return ({f"{part}.{name}": size for part in parts for name, size in sizes.items()},
            {f"{part}.offsets": f"{part}.words" for part in parts})


def _cached(config: PosDataConfig, arrays: dict, meta: dict, cached: bool) -> PosDataset:
    """The dataset of a cache entry (a KeyError or ValueError here means the entry is damaged: ArrayCache.load)."""
    vocabs = [Vocabulary.from_dict(meta[name]) for name in ("words", "chars", "tags")]
    data = [TaggedData(*(arrays[f"{part}.{name}"] for name in ("words", "prefixes", "suffixes", "tags", "offsets")))
            for part in ("train", "dev")]
    return _assemble(*data, *vocabs, config, dict(meta["info"], cached=cached))


def synthetic_pos_dataset(num_train: int = 2000, num_dev: int = 200, seed: int = 0, batch_size: int = 1,
                       word_min_freq: int = SYNTHETIC_WORD_MIN_FREQ, char_min_freq: int = 2) -> PosDataset:
    """The synthetic tagging task (data.synthetic) as a PosDataset; train and dev come from different seeds."""
    config = PosDataConfig(train="<synthetic>", word_min_freq=word_min_freq, char_min_freq=char_min_freq,
                           batch_size=batch_size, seed=seed)
    return build_pos_dataset(synthetic_tagged(num_train, seed=seed), synthetic_tagged(num_dev, seed=seed + 1_000_003),
                          config, {"train_path": "<synthetic>", "dev_path": "<synthetic>"})
