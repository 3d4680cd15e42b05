"""Prefix/suffix character ids: length 10, prefix right-padded, suffix left-padded (data/features.py)."""
from hogwild.data.features import affix_arrays, affix_ids
from hogwild.data.vocab import UNK, Vocabulary

CHARS = Vocabulary(list("abcdefghijklmnopqrstuvwxyz"))  # a=4 ... z=29


def ids(text):
    return [CHARS.index(c) for c in text]


def test_short_word_is_padded_on_the_right_side_of_each_affix():
    prefix, suffix = affix_ids("haus", CHARS)
    assert prefix == ids("haus") + [0] * 6
    assert suffix == [0] * 6 + ids("haus")


def test_long_word_keeps_first_and_last_ten_chars():
    word = "donaudampfschiff"
    prefix, suffix = affix_ids(word, CHARS)
    assert prefix == ids("donaudampf") and suffix == ids("ampfschiff")
    assert len(prefix) == len(suffix) == 10


def test_unknown_chars_and_other_lengths():
    prefix, suffix = affix_ids("Zé", CHARS, length=3)
    assert prefix == [UNK, UNK, 0] and suffix == [0, UNK, UNK]
    assert affix_ids("", CHARS, length=2) == ([0, 0], [0, 0])


def test_arrays_match_per_word_ids():
    prefixes, suffixes = affix_arrays(["ab", "abcdefghijkl", "ab"], CHARS)
    assert prefixes.shape == suffixes.shape == (3, 10) and prefixes.dtype.name == "int64"
    for row, word in enumerate(["ab", "abcdefghijkl", "ab"]):
        assert (prefixes[row].tolist(), suffixes[row].tolist()) == affix_ids(word, CHARS)
