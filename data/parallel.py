"""Line-aligned parallel text for NMT: find ``prefix.src`` / ``prefix.tgt`` (optionally compressed), check the line
counts agree, tokenize, drop empty and too-long pairs and count what was dropped.

Usage: ``corpus = read_parallel("../shared/corpora/europarl-fr-en/train", "fr", "en", max_len=50, tokenize=moses)``
-> ``corpus.src[i]`` / ``corpus.tgt[i]`` token lists, ``corpus.total``, ``corpus.dropped_empty``, ``corpus.dropped_long``;
``for src, tgt in parallel_chunks(prefix, "fr", "en", size=5000): ...`` reads a corpus of any size a chunk at a time
(data/streamed_nmt.py), and ``pair_verdict`` is the one filter both apply.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .compressed import find_compressed, numbered_lines
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


def parallel_chunks(prefix: str | os.PathLike, src_lang: str, tgt_lang: str, encoding: str = "utf-8",
                    limit: int | None = None, size: int | None = None) -> Iterator[tuple[list[str], list[str]]]:
    """Raw aligned lines of both sides, ``size`` pairs at a time (all at once when None), the first ``limit`` when
    given. The files are read to their ends whatever the limit: different line counts raise CorpusError when the
    shorter file ends (after the chunks before it), two empty files when both end."""
    src_path, tgt_path = parallel_files(prefix, src_lang, tgt_lang)
    sources, targets = numbered_lines(src_path, encoding), numbered_lines(tgt_path, encoding)
    count, src, tgt = 0, [], []
    for source, target in zip_longest(sources, targets):
        if source is None or target is None:
            longer = count + 1 + sum(1 for _ in (sources if target is None else targets))
            counts = (longer, count) if target is None else (count, longer)
            shorter = tgt_path if target is None else src_path
            raise CorpusError(f"{src_path.name} has {counts[0]} lines but {tgt_path.name} has {counts[1]}: the files "
                              f"are not line-aligned ({shorter.name} ends first)", path=shorter, line=count + 1)
        count += 1
        if limit is None or count <= limit:
            src.append(source[1])
            tgt.append(target[1])
            if size is not None and len(src) == size:
                yield src, tgt
                src, tgt = [], []
    if not count:
        raise CorpusError("empty parallel corpus", path=src_path)
    if src:
        yield src, tgt


def read_parallel_lines(prefix: str | os.PathLike, src_lang: str, tgt_lang: str, encoding: str = "utf-8",
                        limit: int | None = None) -> tuple[list[str], list[str], Path, Path]:
    """Raw aligned lines of both sides (the first ``limit`` when given). Different line counts -> CorpusError."""
    src_path, tgt_path = parallel_files(prefix, src_lang, tgt_lang)
    src, tgt = next(parallel_chunks(prefix, src_lang, tgt_lang, encoding, limit))
    return src, tgt, src_path, tgt_path


def pair_verdict(src: Sequence[str], tgt: Sequence[str], max_len: int | None) -> str | None:
    """What becomes of a tokenized pair: None (kept), "empty" (a side has no unit) or "long" (a side has more than
    ``max_len`` units; None keeps every length)."""
    if not src or not tgt:  # tokenization removed everything (e.g. a line of control characters)
        return "empty"
    if max_len is not None and (len(src) > max_len or len(tgt) > max_len):
        return "long"
    return None


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
        verdict = pair_verdict(s, t, max_len)
        if verdict == "empty":
            corpus.dropped_empty += 1
        elif verdict == "long":
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
