"""data.compressed: compressed files, encodings, and errors that name the file and line."""
import bz2
import gzip
import lzma

import pytest

from hogwild.data.errors import CorpusError
from hogwild.data.compressed import find_compressed, numbered_lines, read_lines, strip_compression

TEXT = "première ligne\r\nzweite Zeile\n\nlast"


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".xz", lzma.compress), (".bz2", bz2.compress)])
def test_compressed_files_read_like_plain_text(tmp_path, suffix, compress):
    path = tmp_path / f"corpus.txt{suffix}"
    path.write_bytes(compress(TEXT.encode("utf-8")))
    assert read_lines(path) == ["première ligne", "zweite Zeile", "", "last"]
    bare = tmp_path / "no_suffix"  # compression recognised by magic bytes too
    bare.write_bytes(path.read_bytes())
    assert list(numbered_lines(bare)) == [(1, "première ligne"), (2, "zweite Zeile"), (3, ""), (4, "last")]


def test_encoding_argument(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café\nné\n".encode("latin-1"))
    assert read_lines(path, encoding="latin-1") == ["café", "né"]
    with pytest.raises(CorpusError) as error:
        read_lines(path)  # utf-8 by default: byte 0xe9 cannot be decoded
    assert error.value.line == 1 and str(error.value).startswith(f"{path}:1: cannot decode byte b'\\xe9' at column 4")


def test_undecodable_line_in_compressed_file_names_the_line(tmp_path):
    path = tmp_path / "bad.xz"
    path.write_bytes(lzma.compress(b"ok\nalso ok\nbad \xff byte\n"))
    with pytest.raises(CorpusError, match=r"bad\.xz:3: cannot decode"):
        read_lines(path)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(CorpusError, match="nothere.txt: file not found"):
        read_lines(tmp_path / "nothere.txt")
    with pytest.raises(CorpusError, match="not a regular file"):
        read_lines(tmp_path)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(b"hello\n" * 1000)[:40])
    with pytest.raises(CorpusError, match="broken.gz.*cannot read"):
        read_lines(broken)


def test_find_compressed_and_strip(tmp_path):
    (tmp_path / "train.fr.xz").write_bytes(lzma.compress(b"x\n"))
    assert find_compressed(tmp_path / "train.fr") == tmp_path / "train.fr.xz"
    with pytest.raises(CorpusError, match=r"train\.de: file not found \(also tried \.gz, \.xz, \.bz2\)"):
        find_compressed(tmp_path / "train.de")
    assert strip_compression("de_gsd-ud-dev.conllu.bz2") == "de_gsd-ud-dev.conllu"
    assert strip_compression("ca01") == "ca01"
