"""Moses tokenization and detokenization per language (sacremoses), optional lowercasing, parallel over processes.

Usage: ``moses = MosesText("fr"); tokens = moses.tokenize("L'Europe, c'est nous.")``;
``tokenize_lines(lines, "fr", processes=2)`` for a corpus; ``MosesText("en").detokenize(tokens)`` before BLEU.

Tokens are not XML-escaped (``&`` stays ``&``): the text is never fed to Moses' SMT tools, and detokenized output
must compare with raw references. Aggressive dash splitting is off (the Moses default).
"""
from __future__ import annotations

import multiprocessing
import os
from typing import Sequence


class MosesText:
    """A Moses tokenizer/detokenizer pair for one language; picklable (rebuilt from ``lang`` in each process)."""

    def __init__(self, lang: str, lowercase: bool = False):
        if not lang or not lang.isalpha():
            raise ValueError(f"lang must be a language code such as 'fr', got {lang!r}")
        self.lang, self.lowercase = lang, lowercase
        from sacremoses import MosesDetokenizer, MosesTokenizer  # here: its import compiles regexes (0.3-0.7 s), and
        # every run.py start (and every spawned worker's) imports this module, most of them never tokenizing
        self._tokenizer = MosesTokenizer(lang=lang)
        self._detokenizer = MosesDetokenizer(lang=lang)

    def __getstate__(self):
        return {"lang": self.lang, "lowercase": self.lowercase}

    def __setstate__(self, state):
        self.__init__(state["lang"], state["lowercase"])

    def tokenize(self, line: str) -> list[str]:
        """Moses tokens of one line (lowercased first when ``lowercase``)."""
        if self.lowercase:
            line = line.lower()
        return self._tokenizer.tokenize(line, escape=False)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Text from Moses tokens: the inverse of :meth:`tokenize` up to whitespace (use before scoring BLEU)."""
        return self._detokenizer.detokenize(list(tokens), unescape=False)


def _tokenize_chunk(args: tuple[str, bool, list[str]]) -> list[list[str]]:
    lang, lowercase, lines = args
    moses = MosesText(lang, lowercase)
    return [moses.tokenize(line) for line in lines]


def default_processes() -> int:
    """Processes for tokenization: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def tokenize_lines(lines: Sequence[str], lang: str, lowercase: bool = False, processes: int = 1,
                   chunk_size: int = 5000) -> list[list[str]]:
    """Moses-tokenize many lines, in order. ``processes > 1`` splits them into chunks over a spawn Pool
    (worth it above ~20k lines; spawn, not fork, because the parent may hold torch threads)."""
    if processes < 1 or chunk_size < 1:
        raise ValueError(f"processes and chunk_size must be >= 1, got {processes}, {chunk_size}")
    chunks = [(lang, lowercase, list(lines[i:i + chunk_size])) for i in range(0, len(lines), chunk_size)]
    if processes == 1 or len(chunks) <= 1:
        return [tokens for chunk in chunks for tokens in _tokenize_chunk(chunk)]
    with multiprocessing.get_context("spawn").Pool(min(processes, len(chunks))) as pool:
        return [tokens for result in pool.imap(_tokenize_chunk, chunks) for tokens in result]
