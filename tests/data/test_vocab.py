"""Vocabulary: specials, top-K, min_freq, deterministic ties, encode/decode and JSON round trips."""
from collections import Counter

import pytest

from hogwild.data.vocab import BOS, EOS, PAD, SPECIALS, TAG_SPECIALS, UNK, Vocabulary

SENTENCES = [["le", "chat", "dort"], ["le", "chien", "dort"], ["le", "chat", "mange"]]


def test_specials_have_fixed_ids():
    vocab = Vocabulary.build(SENTENCES)
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert vocab.itos[:4] == ["<pad>", "<unk>", "<s>", "</s>"] == list(SPECIALS)
    assert vocab.itos[4:] == ["le", "chat", "dort", "chien", "mange"]  # by count, ties by first appearance


def test_top_k_and_min_freq():
    assert Vocabulary.build(SENTENCES, max_size=2).itos[4:] == ["le", "chat"]
    assert Vocabulary.build(SENTENCES, min_freq=2).itos[4:] == ["le", "chat", "dort"]
    assert len(Vocabulary.build(SENTENCES, max_size=0)) == 4
    counts = Counter({"<unk>": 9, "a": 3})  # a literal special in the data is not added twice
    assert Vocabulary.from_counts(counts).itos == list(SPECIALS) + ["a"]
    with pytest.raises(ValueError, match="min_freq must be >= 1"):
        Vocabulary.build(SENTENCES, min_freq=0)


def test_encode_decode_round_trip():
    vocab = Vocabulary.build(SENTENCES)
    ids = vocab.encode(["le", "chat", "chante"], bos=True, eos=True)
    assert ids == [BOS, 4, 5, UNK, EOS]
    assert vocab.decode(ids) == ["le", "chat", "<unk>"]
    assert vocab.decode([4, 5, EOS, 6, PAD]) == ["le", "chat"]                  # stops at eos
    assert vocab.decode([4, PAD, 5], strip=False) == ["le", "<pad>", "chat"]
    for sentence in SENTENCES:
        assert vocab.decode(vocab.encode(sentence, eos=True)) == sentence
    assert vocab.index("mange") == 8 and vocab.index("nope") == UNK and "chien" in vocab


def test_tag_vocabulary_has_pad_and_unk_only():
    tags = Vocabulary.build([["DET", "NOUN"], ["NOUN"]], specials=TAG_SPECIALS)
    assert tags.itos == ["<pad>", "<unk>", "NOUN", "DET"]
    assert tags.encode(["DET", "VERB"]) == [3, UNK]
    assert tags.decode([2, 3, 2]) == ["NOUN", "DET", "NOUN"]  # ids 2 and 3 are tags here, not bos/eos


def test_json_round_trip(tmp_path):
    vocab = Vocabulary.build(SENTENCES + [["été", "ça"]])
    vocab.save(tmp_path / "v.json")
    again = Vocabulary.load(tmp_path / "v.json")
    assert again == vocab and again.stoi == vocab.stoi and again.itos[-2:] == ["été", "ça"]
    tags = Vocabulary(["A"], TAG_SPECIALS)
    tags.save(tmp_path / "t.json")
    assert Vocabulary.load(tmp_path / "t.json").specials == TAG_SPECIALS


def test_bad_vocabularies():
    with pytest.raises(ValueError, match="duplicate token 'a'"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="specials must start with"):
        Vocabulary(["a"], specials=("<unk>", "<pad>"))
