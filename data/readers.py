"""Readers for POS-tagged corpora: CoNLL-U, whitespace-column CoNLL files and slash-tagged text.

Usage: ``sentences = read_tagged("../shared/corpora/brown")`` -> ``[[("The", "at"), ("Fulton", "np-tl"), ...], ...]``

Formats (``format=``):
- ``"conllu"``: parsed with the ``conllu`` library; multiword-token ranges (``4-5``) and empty nodes (``8.1``) are
  skipped. ``tag="upos"`` (default), ``"xpos"``, or ``"xpos+feats"`` (``XPOS|Case=Nom|Number=Sing``, one fine-grained,
  TIGER-style tag; plain ``XPOS`` when FEATS is ``_``).
- ``"conll"``: one token per line, blank line between sentences, columns split on tabs (or runs of spaces when a line
  has no tab). Column numbers are 1-based as in the CoNLL documentation. Defaults from the first token line: an integer
  id and 10 columns is CoNLL-X (word 2, tag 5 POSTAG, coarse 4 CPOSTAG, feats 6); an integer id and >= 12 columns is
  CoNLL-2009, the TIGER release (word 2, tag 5 POS, feats 7); anything else is CoNLL-2000 (word 1, tag 2).
  ``word_column=``, ``tag_column=``, ``feats_column=`` override them.
- ``"slash"``: one sentence per line, ``word/TAG`` tokens split at the LAST ``separator`` (the Brown corpus).
- ``"auto"``: :func:`detect_format` decides from the file name and its first lines.

A folder is one corpus: its data files are read in sorted order, skipping documentation (README, CONTENTS, cats.txt,
LICENSE, *.md). Files may be .gz/.xz/.bz2. Every problem raises :class:`data.errors.CorpusError` with file and line.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import conllu

from .compressed import numbered_lines, strip_compression
from .errors import CorpusError

TaggedSentence = list[tuple[str, str]]
FORMATS = ("auto", "conllu", "conll", "slash")
TAGS = ("upos", "xpos", "xpos+feats")
UPOS = frozenset("ADJ ADP ADV AUX CCONJ DET INTJ NOUN NUM PART PRON PROPN PUNCT SCONJ SYM VERB X".split())
_DOC_NAMES = frozenset({"readme", "contents", "cats.txt", "license", "license.txt", "copying", "source.md"})
_DOC_SUFFIXES = (".md", ".ids", ".sgm", ".json", ".html", ".pdf")
_MISSING = ("", "_")


def corpus_files(path: str | os.PathLike) -> list[Path]:
    """The data files of a corpus: the file itself, or a folder's files minus documentation, sorted by name."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise CorpusError("corpus not found", path=path)
    files = []
    for child in sorted(path.iterdir()):
        name = strip_compression(child.name).lower()
        if child.name.startswith(".") or name in _DOC_NAMES or name.startswith("readme") or \
                name.endswith(_DOC_SUFFIXES) or child.is_dir():
            continue
        if not child.is_file():  # was skipped without a word: its sentences would be missing from the corpus
            kind = "a broken link" if not child.exists() else "a FIFO" if child.is_fifo() else \
                "a socket" if child.is_socket() else "a device" if child.is_char_device() or child.is_block_device() \
                else "not a file"
            raise CorpusError(f"{kind}, not a data file: every file of a corpus folder is read (move it out of "
                              f"the folder)", path=child)
        files.append(child)
    if not files:
        raise CorpusError("no data files in folder", path=path)
    return files


def _sample(path: Path, encoding: str, limit: int = 50) -> list[tuple[int, str]]:
    """The first `limit` non-blank lines as (line number, text)."""
    lines = []
    for number, text in numbered_lines(path, encoding):
        if text.strip():
            lines.append((number, text))
            if len(lines) >= limit:
                break
    return lines


def detect_format(path: str | os.PathLike, separator: str = "/", encoding: str = "utf-8") -> str:
    """Guess ``"conllu"``, ``"conll"`` or ``"slash"`` from the first data file's name and first 50 non-blank lines.

    ``.conllu`` files and files with ``#`` comments or UD tags in column 4 of 10 are CoNLL-U; lines whose every token
    holds the separator are slash-tagged; lines with a constant number (>= 2) of columns are CoNLL columns.
    """
    first = corpus_files(path)[0]
    name = strip_compression(first.name)
    if name.endswith(".conllu"):
        return "conllu"
    lines = _sample(first, encoding)
    if not lines:
        raise CorpusError("empty corpus: cannot detect its format", path=first)
    tokens = [(number, line) for number, line in lines if not line.startswith("#")]
    tabbed = [line.split("\t") for _, line in tokens if "\t" in line]
    if tabbed and all(len(fields) == 10 for fields in tabbed):
        words = [fields for fields in tabbed if fields[0].isdigit()]
        if len(tokens) < len(lines) or len(words) < len(tabbed) or all(fields[3] in UPOS for fields in words):
            return "conllu"  # comments, multiword ranges / empty nodes, or UD tags in column 4
        return "conll"
    unslashed = [(number, tok) for number, line in tokens for tok in line.split() if separator not in tok]
    if not unslashed:
        return "slash"
    rows = [(number, len(line.split())) for number, line in tokens if not line.startswith("-DOCSTART-")]
    widths = [width for _, width in rows]
    if len(set(widths)) == 1 and widths[0] >= 2:
        return "conll"
    # Say where the file stops looking like the more likely format: a token without the separator in slash-tagged
    # text, else the first line whose column count differs from the most common one.
    slashed = sum(1 for _, line in tokens if all(separator in tok for tok in line.split()))
    if slashed * 2 >= len(tokens):
        number, token = unslashed[0]
        why = f"token {token!r} has no {separator!r} as in word{separator}TAG"
    else:
        usual = max(set(widths), key=widths.count)
        number, width = next((n, w) for n, w in rows if w != usual)
        why = f"{width} columns where most lines have {usual}"
    raise CorpusError(f"cannot detect the format: {why} (not CoNLL-U, CoNLL columns or slash-tagged text); give "
                      f"the format: conllu, conll or slash", path=first, line=number, option="format")


def read_tagged(path: str | os.PathLike, format: str = "auto", tag: str | None = None, *,
                word_column: int | None = None, tag_column: int | None = None, feats_column: int | None = None,
                separator: str = "/", encoding: str = "utf-8") -> list[TaggedSentence]:
    """Read a tagged corpus (a file or a folder of files) into sentences of ``(word, tag)`` pairs.

    ``tag``: ``None`` takes the format's main tag (UPOS for CoNLL-U, the tag column otherwise), or one of
    ``"upos"``, ``"xpos"``, ``"xpos+feats"``. Raises :class:`CorpusError` for malformed lines and empty corpora.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if tag is not None and tag not in TAGS:
        raise ValueError(f"tag must be None or one of {TAGS}, got {tag!r}")
    if not separator:
        raise ValueError("separator must be a non-empty string")
    for name, column in (("word_column", word_column), ("tag_column", tag_column), ("feats_column", feats_column)):
        if column is not None and column < 1:
            raise ValueError(f"{name} is 1-based, got {column}")
    if format == "auto":
        format = detect_format(path, separator, encoding)
    if format == "conllu" and (word_column or tag_column or feats_column):
        option = "word_column" if word_column else "tag_column" if tag_column else "feats_column"
        raise CorpusError("is CoNLL-U, whose columns are fixed: word, tag and feats columns apply to CoNLL column "
                          "files only (choose UPOS or XPOS with the tag option: run.py --tag upos|xpos)", path=corpus_files(path)[0],
                          option=option)
    if format == "slash" and tag not in (None, "xpos"):
        raise ValueError(f"slash-tagged text has a single tag per word; tag={tag!r} does not apply")
    sentences: list[TaggedSentence] = []
    for file in corpus_files(path):
        if format == "conllu":
            sentences.extend(_read_conllu(file, tag or "upos", encoding))
        elif format == "conll":
            sentences.extend(_read_columns(file, tag, word_column, tag_column, feats_column, encoding))
        else:
            sentences.extend(_read_slash(file, separator, encoding))
    if not sentences:
        raise CorpusError("empty corpus: no sentences", path=path)
    return sentences


def _read_slash(path: Path, separator: str, encoding: str) -> Iterator[TaggedSentence]:
    for number, text in numbered_lines(path, encoding):
        tokens = text.split()
        if not tokens:
            continue
        sentence = []
        for token in tokens:
            word, sep, label = token.rpartition(separator)
            if not sep or not word or not label:
                raise CorpusError(f"token {token!r} is not word{separator}TAG", path=path, line=number)
            sentence.append((word, label))
        yield sentence


def _blocks(path: Path, encoding: str) -> Iterator[list[tuple[int, str]]]:
    """Blank-line separated blocks of ``(line_number, text)``."""
    block: list[tuple[int, str]] = []
    for number, text in numbered_lines(path, encoding):
        if text.strip():
            block.append((number, text))
        elif block:
            yield block
            block = []
    if block:
        yield block


def _read_conllu(path: Path, tag: str, encoding: str) -> Iterator[TaggedSentence]:
    for block in _blocks(path, encoding):
        token_lines = [(number, text) for number, text in block if not text.startswith("#")]
        for number, text in token_lines:
            width = len(text.split("\t"))
            if width != 10:
                raise CorpusError(f"expected 10 tab-separated CoNLL-U columns, found {width}", path=path, line=number)
        if not token_lines:
            continue
        try:
            (tokens,) = conllu.parse("\n".join(text for _, text in block) + "\n\n")
        except Exception as error:  # conllu raises ParseException and ValueError subclasses
            raise CorpusError(f"CoNLL-U parse error: {error}", path=path, line=_bad_line(token_lines, block)) \
                from None
        words = [(number, t) for (number, _), t in zip(token_lines, tokens) if isinstance(t["id"], int)]
        sentence = []
        for number, token in words:
            upos, xpos, feats = token["upos"], token["xpos"], token["feats"]
            value = upos if tag == "upos" else xpos
            if value is None or value in _MISSING:
                raise CorpusError(f"missing {tag.split('+')[0].upper()} tag for word {token['form']!r}",
                                  path=path, line=number)
            if tag == "xpos+feats" and feats:
                value = value + "|" + "|".join(f"{key}={val}" for key, val in feats.items())
            sentence.append((token["form"], value))
        if sentence:
            yield sentence


def _bad_line(token_lines: list[tuple[int, str]], block: list[tuple[int, str]]) -> int:
    """The number of the first token line conllu cannot parse on its own (else the sentence's first line: the
    problem is between lines, e.g. in the ids)."""
    for number, text in token_lines:
        try:
            conllu.parser.parse_line(text, conllu.parser.DEFAULT_FIELDS)
        except Exception:  # noqa: BLE001 - the same errors as conllu.parse, raised per line
            return number
    return block[0][0]


def _columns(first: list[str], tag: str | None, word_column, tag_column, feats_column):
    """1-based (word, tag, feats) columns: explicit ones, else the defaults of the detected CoNLL variant."""
    has_id = first[0].isdigit()
    if has_id and len(first) >= 12:  # CoNLL-2009: ID FORM LEMMA PLEMMA POS PPOS FEAT PFEAT ...
        defaults = {"word": 2, "xpos": 5, "upos": None, "feats": 7}
    elif has_id and len(first) == 10:  # CoNLL-X: ID FORM LEMMA CPOSTAG POSTAG FEATS ...
        defaults = {"word": 2, "xpos": 5, "upos": 4, "feats": 6}
    else:  # CoNLL-2000: word POS chunk
        defaults = {"word": 1, "xpos": 2, "upos": None, "feats": None}
    word = word_column or defaults["word"]
    label = tag_column or defaults["upos" if tag == "upos" else "xpos"]
    feats = feats_column or defaults["feats"]
    if label is None:
        raise ValueError(f"tag={tag!r}: this CoNLL variant has no such column; pass tag_column=")
    if tag == "xpos+feats" and feats is None:
        raise ValueError("tag='xpos+feats': this CoNLL variant has no FEATS column; pass feats_column=")
    return word, label, feats if tag == "xpos+feats" else None


def _read_columns(path: Path, tag, word_column, tag_column, feats_column, encoding) -> Iterator[TaggedSentence]:
    columns = width = None
    for block in _blocks(path, encoding):
        sentence = []
        for number, text in block:
            if text.startswith("-DOCSTART-"):  # CoNLL-2003 document marker ("#" is a word here, not a comment)
                continue
            fields = text.split("\t") if "\t" in text else text.split()
            if columns is None:
                width = len(fields)
                columns = _columns(fields, tag, word_column, tag_column, feats_column)
                needed = max(c for c in columns if c is not None)
                if width < needed:
                    raise CorpusError(f"found {width} columns but column {needed} is needed", path=path, line=number)
            if len(fields) != width:
                raise CorpusError(f"expected {width} columns (as on the first token line), found {len(fields)}",
                                  path=path, line=number)
            word, label = fields[columns[0] - 1], fields[columns[1] - 1]
            if label in _MISSING or word == "":
                raise CorpusError(f"missing tag for word {word!r} (column {columns[1]})", path=path, line=number)
            if columns[2] is not None and fields[columns[2] - 1] not in _MISSING:
                label = label + "|" + fields[columns[2] - 1]
            sentence.append((word, label))
        if sentence:
            yield sentence
