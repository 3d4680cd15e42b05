"""Parallel text: file discovery, empty/too-long filters with counts, mismatched files, the real Europarl."""
import lzma
import pathlib

import pytest

from hogwild.data.errors import CorpusError
from hogwild.data.parallel import read_parallel, read_parallel_lines

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "data"


def test_filters_and_counts():
    corpus = read_parallel(FIXTURES / "tiny", "fr", "en", max_len=10)
    assert corpus.src == [["Bonjour", "le", "monde", "."], ["Le", "chat", "dort", "."], ["Merci", "!"]]
    assert corpus.tgt == [["Hello", "world", "."], ["The", "cat", "sleeps", "."], ["Thank", "you", "!"]]
    assert corpus.line_numbers == [1, 2, 5] and corpus.tgt_lines[2] == "Thank you !"
    assert corpus.counts() == {"total": 5, "kept": 3, "dropped_empty": 1, "dropped_long": 1, "held_out": 0}
    assert len(read_parallel(FIXTURES / "tiny", "fr", "en", max_len=12)) == 4   # 12 tokens is not > 12
    assert read_parallel(FIXTURES / "tiny", "fr", "en", max_len=None).dropped_long == 0
    assert read_parallel(FIXTURES / "tiny", "en", "fr", limit=2).counts() == {
        "total": 2, "kept": 2, "dropped_empty": 0, "dropped_long": 0, "held_out": 0}


def test_custom_tokenizer_decides_lengths():
    corpus = read_parallel(FIXTURES / "tiny", "fr", "en", max_len=3,
                           tokenize=lambda lines, lang: [list(line.replace(" ", ""))[:3] for line in lines])
    assert corpus.src[0] == ["B", "o", "n"] and corpus.dropped_long == 0


def test_compressed_sides(tmp_path):
    for lang in ("fr", "en"):
        (tmp_path / f"train.{lang}.xz").write_bytes(lzma.compress((FIXTURES / f"tiny.{lang}").read_bytes()))
    assert read_parallel(tmp_path / "train", "fr", "en").src == read_parallel(FIXTURES / "tiny", "fr", "en").src


def test_mismatched_line_counts(tmp_path):
    (tmp_path / "t.fr").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("A\nB\n", encoding="utf-8")
    with pytest.raises(CorpusError) as error:
        read_parallel(tmp_path / "t", "fr", "en")
    assert str(error.value) == (f"{tmp_path / 't.en'}:3: t.fr has 3 lines but t.en has 2: the files are not "
                                "line-aligned (t.en ends first)")


def test_missing_empty_and_all_filtered(tmp_path):
    with pytest.raises(CorpusError, match=r"t\.fr: file not found"):
        read_parallel(tmp_path / "t", "fr", "en")
    (tmp_path / "e.fr").write_text("", encoding="utf-8")
    (tmp_path / "e.en").write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"e\.fr: empty parallel corpus"):
        read_parallel(tmp_path / "e", "fr", "en")
    (tmp_path / "w.fr").write_text("\n  \n", encoding="utf-8")
    (tmp_path / "w.en").write_text("x\ny\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="no pairs left after filtering"):
        read_parallel(tmp_path / "w", "fr", "en")


def test_undecodable_line(tmp_path):
    (tmp_path / "u.fr").write_bytes(b"ok\nbad \xe9\n")
    (tmp_path / "u.en").write_text("ok\nfine\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"u\.fr:2: cannot decode"):
        read_parallel(tmp_path / "u", "fr", "en")


@pytest.mark.corpora
def test_europarl_fr_en_counts(corpus):
    folder = corpus("europarl-fr-en")
    src, tgt, src_path, _ = read_parallel_lines(folder / "train", "fr", "en")
    assert (len(src), len(tgt), src_path.name) == (200_000, 200_000, "train.fr.xz")
    dev = read_parallel(folder / "dev", "fr", "en", max_len=None)
    assert dev.counts() == {"total": 3_000, "kept": 3_000, "dropped_empty": 0, "dropped_long": 0, "held_out": 0}
    assert dev.src_lines[0] == "Reprise de la session"
