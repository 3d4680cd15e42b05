"""How a task's text becomes ids and ids become text: the one path for training data, held-out sets and new text
(run.py tag / translate), saved into a run directory and loaded back from it without the corpus.

Usage: ``encoder = NmtEncoder.load(run_dir); batch = encoder.encode_source(["Bonjour ."]); encoder.decode(ids)``;
``PosEncoder.load(run_dir).encode_sentences([["The", "dog", "barks"]])``

An NMT run's units are Moses tokens (``kind="moses"``), sentencepiece pieces (``"subwords"``: one model per side,
trained on the training text) or whitespace-separated words (``"join"``: the synthetic task); with ``lowercase`` the
text is lowercased before it is cut, references too. ``text.json`` records the kind, the languages and lowercasing;
the sentencepiece models are ``spm.src.model`` / ``spm.tgt.model`` beside it.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from hogwild.models.special_ids import IGNORE_INDEX, PAD

from .batching import ParallelData, PosBatcher, TaggedData
from .errors import CorpusError, read_json
from .features import AFFIX_LENGTH, affix_arrays
from .moses import MosesText, default_processes, tokenize_lines
from .subwords import SubwordModel
from .vocab import Vocabulary

TEXT_FILE = "text.json"  # {"kind", "src_lang", "tgt_lang", "lowercase"}
KINDS = ("moses", "subwords", "join")
SIDES = ("src", "tgt")
_POOL_LINES = 20_000  # Moses-tokenize over a process pool only above this many lines (below, the pool costs more)


@dataclass
class NmtText:
    """Raw text <-> units (Moses tokens, sentencepiece pieces or words) for both sides of an NMT task."""
    kind: str = "moses"
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    lowercase: bool = False
    subword_models: dict[str, str] = field(default_factory=dict)  # side -> sentencepiece .model path
    processes: int = 0  # Moses tokenization processes for large inputs; 0 -> all available CPUs
    _target: MosesText | SubwordModel | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "subwords" and sorted(self.subword_models) != list(SIDES):
            raise ValueError(f"subwords need a sentencepiece model per side, got {sorted(self.subword_models)}")

    def side(self, lang: str) -> str:
        if lang not in (self.src_lang, self.tgt_lang):
            raise ValueError(f"language {lang!r} is neither {self.src_lang!r} nor {self.tgt_lang!r}")
        return "src" if lang == self.src_lang else "tgt"

    def prepare(self, lines: Sequence[str]) -> list[str]:
        """Raw lines as the units are cut from them (lowercased when ``lowercase``): also how references are
        compared with detokenized output."""
        return [line.lower() for line in lines] if self.lowercase else list(lines)

    def tokenize(self, lines: Sequence[str], lang: str) -> list[list[str]]:
        """Raw lines of language ``lang`` -> units (the ``tokenize(lines, lang)`` of data.parallel.read_parallel)."""
        side = self.side(lang)
        if self.kind == "join":
            return [line.split() for line in self.prepare(lines)]
        if self.kind == "subwords":
            return SubwordModel(self.subword_models[side]).encode_lines(self.prepare(lines))
        processes = (self.processes or default_processes()) if len(lines) > _POOL_LINES else 1
        return tokenize_lines(lines, lang, self.lowercase, processes)

    def detokenize(self, units: Sequence[str]) -> str:
        """Target units -> text (sentencepiece decode, Moses detokenization or a plain join): what BLEU scores."""
        if self.kind == "join":
            return " ".join(units)
        if self.kind == "subwords":
            return self._decoder().decode(units)
        return self._decoder().detokenize(units)

    def _decoder(self):
        if self._target is None:
            self._target = (SubwordModel(self.subword_models["tgt"]) if self.kind == "subwords"
                            else MosesText(self.tgt_lang))
        return self._target

    def save(self, run_dir: Path) -> None:
        """``text.json`` and (subwords) ``spm.src.model`` / ``spm.tgt.model`` into ``run_dir``."""
        for side, model in sorted(self.subword_models.items()):
            if Path(model).resolve() != (run_dir / f"spm.{side}.model").resolve():
                shutil.copyfile(model, run_dir / f"spm.{side}.model")
        record = {"kind": self.kind, "src_lang": self.src_lang, "tgt_lang": self.tgt_lang, "lowercase": self.lowercase}
        (run_dir / TEXT_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> "NmtText":
        record = read_json(run_dir / TEXT_FILE)
        if not isinstance(record, dict) or record.get("kind") not in KINDS or \
                not all(isinstance(record.get(name), str) for name in ("src_lang", "tgt_lang")):
            raise CorpusError(f'not a text settings file (a JSON object {{"kind": {" | ".join(map(repr, KINDS))}, '
                              f'"src_lang": ..., "tgt_lang": ...}})', path=run_dir / TEXT_FILE)
        models = {side: str(run_dir / f"spm.{side}.model") for side in SIDES} if record["kind"] == "subwords" else {}
        return cls(record["kind"], record["src_lang"], record["tgt_lang"], record.get("lowercase", False), models,
                   processes=1)


@dataclass
class NmtEncoder:
    """An NMT task's text handling and vocabularies: raw lines -> id arrays and batches, target ids -> text."""
    text: NmtText
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary

    def tensorize(self, src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]]) -> ParallelData:
        """Tokenized pairs -> id arrays (unknown units -> unk; the batcher adds bos/eos)."""
        return ParallelData.tensorize(list(zip(src, tgt)), self.src_vocab, self.tgt_vocab)

    def source_ids(self, lines: Sequence[str]) -> list[list[int]]:
        """Raw source lines -> ids with eos appended, one list per line."""
        return [self.src_vocab.encode(units, eos=True) for units in self.text.tokenize(lines, self.text.src_lang)]

    @staticmethod
    def source_batch(ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Id lists (eos included) -> ``{"src": (B, S), "src_mask": (B, S)}``, pad 0: the source half of a batch."""
        src = torch.full((len(ids), max(map(len, ids), default=1)), PAD, dtype=torch.long)  # (B, S)
        for row, sentence in enumerate(ids):
            src[row, :len(sentence)] = torch.tensor(sentence, dtype=torch.long)
        return {"src": src, "src_mask": src != PAD}

    def encode_source(self, lines: Sequence[str]) -> dict[str, torch.Tensor]:
        """Raw source lines -> ``{"src": (B, S), "src_mask": (B, S)}`` (for translation)."""
        return self.source_batch(self.source_ids(lines))

    def decode(self, ids) -> str:
        """Target ids (a model's output; stops at eos, drops pad/bos) -> detokenized text."""
        return self.text.detokenize(self.tgt_vocab.decode(ids))

    def save(self, run_dir: str | os.PathLike) -> None:
        """``vocab.src.json``, ``vocab.tgt.json``, ``text.json`` and the sentencepiece models into a run folder."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.src_vocab.save(run_dir / "vocab.src.json")
        self.tgt_vocab.save(run_dir / "vocab.tgt.json")
        self.text.save(run_dir)

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "NmtEncoder":
        run_dir = Path(run_dir)
        return cls(NmtText.load(run_dir), Vocabulary.load(run_dir / "vocab.src.json"),
                   Vocabulary.load(run_dir / "vocab.tgt.json"))


@dataclass
class PosEncoder:
    """A POS task's vocabularies: tagged or untagged sentences -> arrays and batches, in the batch contract."""
    words: Vocabulary
    chars: Vocabulary
    tags: Vocabulary
    affix_length: int = AFFIX_LENGTH

    def tensorize(self, sentences: Sequence[Sequence[tuple[str, str]]]) -> TaggedData:
        """Tagged sentences -> arrays (unknown words, characters and tags -> unk)."""
        return TaggedData.tensorize(sentences, self.words, self.chars, self.tags, self.affix_length)

    def encode_sentences(self, sentences: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:
        """Untagged, tokenized sentences -> one POS batch (data/batching.py) with every tag -100 (for tagging text)."""
        if not sentences or not all(sentences):
            raise ValueError("encode_sentences needs at least one sentence and no empty sentence")
        tokens = [word for sentence in sentences for word in sentence]
        prefixes, suffixes = affix_arrays(tokens, self.chars, self.affix_length)  # (N, L) each
        offsets = np.concatenate([[0], np.cumsum([len(sentence) for sentence in sentences])]).astype(np.int64)
        data = TaggedData(np.asarray(self.words.encode(tokens), dtype=np.int64), prefixes, suffixes,
                          np.full(len(tokens), IGNORE_INDEX, dtype=np.int64), offsets)  # offsets (S+1,)
        return PosBatcher(data, len(sentences)).batch(np.arange(len(sentences)))

    def save(self, run_dir: str | os.PathLike) -> None:
        """``vocab.words.json``, ``vocab.chars.json`` and ``vocab.tags.json`` into a run folder."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in ("words", "chars", "tags"):
            getattr(self, name).save(run_dir / f"vocab.{name}.json")

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "PosEncoder":
        run_dir = Path(run_dir)
        return cls(*(Vocabulary.load(run_dir / f"vocab.{name}.json") for name in ("words", "chars", "tags")))
