"""CorpusError: the message starts with file and line so that a command line can print it alone."""
import pathlib

from hogwild.data import CorpusError


def test_message_forms():
    assert str(CorpusError("bad", path=pathlib.Path("a/b.txt"), line=7)) == "a/b.txt:7: bad"
    assert str(CorpusError("bad", path="a/b.txt")) == "a/b.txt: bad"
    assert str(CorpusError("bad")) == "bad"
    error = CorpusError("x", path="f", line=2)
    assert (error.message, error.path, error.line) == ("x", "f", 2) and isinstance(error, ValueError)
