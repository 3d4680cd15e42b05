"""Line-aligned parallel text for NMT: find ``prefix.src`` / ``prefix.tgt`` (optionally compressed), check the line
counts agree, tokenize, drop empty and too-long pairs and count what was dropped.

Usage: ``corpus = read_parallel("../shared/corpora/europarl-fr-en/train", "fr", "en", max_len=50, tokenize=moses)``
-> ``corpus.src[i]`` / ``corpus.tgt[i]`` token lists, ``corpus.total``, ``corpus.dropped_empty``, ``corpus.dropped_long``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .compressed import find_compressed, read_lines
from .errors import CorpusError

# tokenize(lines, lang) -> token lists; e.g. functools.partial(data.moses.tokenize_lines, processes=2)
Tokenize = Callable[[Sequence[str], str], list[list[str]]]


def whitespace_tokenize(lines: Sequence[str], lang: str) -> list[list[str]]:
    """The trivial tokenizer: split on whitespace (for pre-tokenized corpora)."""
    return [line.split() for line in lines]


@dataclass
class ParallelCorpus:
    src: list[list[str]]                             # kept source sentences, tokenized
    tgt: list[list[str]]                             # kept target sentences, tokenized
    src_lines: list[str] = field(repr=False)         # the same sentences, raw text (references for BLEU)
    tgt_lines: list[str] = field(repr=False)
    line_numbers: list[int] = field(repr=False)      # 1-based line of each kept pair in the files
    total: int = 0                                   # pairs in the files (before filtering)
    dropped_empty: int = 0                           # pairs with an empty side
    dropped_long: int = 0                            # pairs with a side longer than max_len tokens
    held_out: int = 0                                # kept pairs moved to a dev set (data.nmt_dataset)

    def __len__(self) -> int:
        return len(self.src)

    def counts(self) -> dict[str, int]:
        return {"total": self.total, "kept": len(self), "dropped_empty": self.dropped_empty,
                "dropped_long": self.dropped_long, "held_out": self.held_out}


def parallel_files(prefix: str | os.PathLike, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """``train`` + ``fr``/``en`` -> paths of ``train.fr[.gz|.xz|.bz2]`` and ``train.en[...]``."""
    prefix = os.fspath(prefix)
    return find_compressed(f"{prefix}.{src_lang}"), find_compressed(f"{prefix}.{tgt_lang}")


def read_parallel_lines(prefix: str | os.PathLike, src_lang: str, tgt_lang: str, encoding: str = "utf-8",
                        limit: int | None = None) -> tuple[list[str], list[str], Path, Path]:
    """Raw aligned lines of both sides (the first ``limit`` when given). Different line counts -> CorpusError."""
    src_path, tgt_path = parallel_files(prefix, src_lang, tgt_lang)
    src, tgt = read_lines(src_path, encoding), read_lines(tgt_path, encoding)
    if len(src) != len(tgt):
        shorter = src_path if len(src) < len(tgt) else tgt_path
        raise CorpusError(f"{src_path.name} has {len(src)} lines but {tgt_path.name} has {len(tgt)}: the files "
                          f"are not line-aligned ({shorter.name} ends first)", path=shorter,
                          line=min(len(src), len(tgt)) + 1)
    if not src:
        raise CorpusError("empty parallel corpus", path=src_path)
    if limit is not None:
        src, tgt = src[:limit], tgt[:limit]
    return src, tgt, src_path, tgt_path


def read_parallel(prefix: str | os.PathLike, src_lang: str, tgt_lang: str, max_len: int | None = 50,
                  tokenize: Tokenize = whitespace_tokenize, encoding: str = "utf-8",
                  limit: int | None = None) -> ParallelCorpus:
    """Read, tokenize and filter a parallel corpus. Pairs with an empty side are dropped and counted; pairs with
    more than ``max_len`` tokens on either side are dropped and counted (``max_len=None`` keeps all)."""
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1 or None, got {max_len}")
    src_lines, tgt_lines, src_path, _ = read_parallel_lines(prefix, src_lang, tgt_lang, encoding, limit)
    nonempty = [i for i, (s, t) in enumerate(zip(src_lines, tgt_lines)) if s.strip() and t.strip()]
    src_tokens = tokenize([src_lines[i] for i in nonempty], src_lang)
    tgt_tokens = tokenize([tgt_lines[i] for i in nonempty], tgt_lang)
    corpus = ParallelCorpus([], [], [], [], [], total=len(src_lines), dropped_empty=len(src_lines) - len(nonempty))
    for i, s, t in zip(nonempty, src_tokens, tgt_tokens):
        if not s or not t:  # tokenization removed everything (e.g. a line of control characters)
            corpus.dropped_empty += 1
        elif max_len is not None and (len(s) > max_len or len(t) > max_len):
            corpus.dropped_long += 1
        else:
            corpus.src.append(s)
            corpus.tgt.append(t)
            corpus.src_lines.append(src_lines[i])
            corpus.tgt_lines.append(tgt_lines[i])
            corpus.line_numbers.append(i + 1)
    if not corpus.src:
        raise CorpusError(f"no pairs left after filtering ({corpus.counts()})", path=src_path)
    return corpus
