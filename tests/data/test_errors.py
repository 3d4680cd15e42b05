"""CorpusError: the message starts with file and line so that a command line can print it alone."""
import pathlib

from hogwild.data import CorpusError


def test_message_forms():
    assert str(CorpusError("bad", path=pathlib.Path("a/b.txt"), line=7)) == "a/b.txt:7: bad"
    assert str(CorpusError("bad", path="a/b.txt")) == "a/b.txt: bad"
    assert str(CorpusError("bad")) == "bad"
    error = CorpusError("x", path="f", line=2)
    assert (error.message, error.path, error.line) == ("x", "f", 2) and isinstance(error, ValueError)


def test_a_json_file_that_cannot_be_parsed_is_named_with_line_and_column(tmp_path):
    import pytest

    from hogwild.data.errors import read_json

    path = tmp_path / "vocab.json"
    path.write_text('{"tokens": ["a",\n  ]}')
    assert str(CorpusError("bad", path="f", line=2, column=5)) == "f:2:5: bad"
    with pytest.raises(CorpusError, match=rf"^{path}:2:3: not valid JSON \(Expecting value\)$"):
        read_json(path)
    path.write_bytes(b'"\xe9"')
    with pytest.raises(CorpusError, match=rf"^{path}: not JSON text \(byte 1 is not utf-8\)$"):
        read_json(path)
    path.write_text('{"a": [1]}')
    assert read_json(path) == {"a": [1]}
