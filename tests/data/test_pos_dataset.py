"""POS task: seeded splits, the paper's UNK rules, the cache, the synthetic task, Brown end to end."""
import pathlib

import numpy as np
import pytest
import torch

from hogwild.data.cache import ArrayCache
from hogwild.data.errors import CorpusError
from hogwild.data.pos_dataset import (PAPER_WORD_MIN_FREQ, WORD_MIN_FREQ, PosDataConfig, build_pos_dataset,
                                      load_pos_dataset, split_sentences, synthetic_pos_dataset)
from hogwild.data.vocab import UNK

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "data"


def test_split_is_seeded_disjoint_and_ordered():
    items = list(range(100))
    train, dev = split_sentences(items, 0.1, seed=3)
    assert len(dev) == 10 and len(train) == 90 and sorted(train + dev) == items
    assert train == sorted(train) and dev == sorted(dev)
    assert split_sentences(items, 0.1, seed=3) == (train, dev) and split_sentences(items, 0.1, seed=4)[1] != dev
    assert split_sentences(["a", "b"], 0.01, seed=0)[1] in (["a"], ["b"])
    with pytest.raises(ValueError, match="at least 2 sentences"):
        split_sentences(["a"])


def test_rare_words_and_chars_become_unk():
    train = [[("the", "D"), ("cat", "N")]] * 10 + [[("the", "D"), ("dog", "N"), ("xylo", "N")]]
    task = build_pos_dataset(train, [[("the", "D"), ("cat", "N"), ("dog", "V")]], PosDataConfig(train="x"))
    assert task.words.itos[4:] == ["the", "cat"]  # "dog" (1) and "xylo" (1) are below the default min_freq 2
    assert [c for c in "thecaodgxyl" if task.chars.index(c) == UNK] == list("dgxyl")  # chars seen once
    batch = task.dev.batch([0])
    assert batch["words"].tolist() == [[task.words.index("the"), task.words.index("cat"), UNK]]
    assert batch["tags"].tolist() == [[task.tags.index("D"), task.tags.index("N"), UNK]]  # unseen tag V
    assert task.info["dev_unk_word_rate"] == pytest.approx(1 / 3)
    loose = build_pos_dataset(train, train[:1], PosDataConfig(train="x", word_min_freq=1, char_min_freq=1))
    assert "xylo" in loose.words and loose.chars.index("x") != UNK


def test_default_vocabulary_keeps_words_seen_twice_and_the_paper_recipe_keeps_ten():
    # counts: the 12, cat 10, dog 3, sat 3, mat 2, on 1, xylo 1
    train = ([[("the", "D"), ("cat", "N")]] * 9 + [[("the", "D"), ("dog", "N"), ("sat", "V")]] * 2
             + [[("the", "D"), ("cat", "N"), ("dog", "N"), ("sat", "V"), ("on", "P"), ("mat", "N")],
                [("mat", "N"), ("xylo", "N")]])
    dev = [[("the", "D"), ("dog", "N"), ("sat", "V"), ("on", "P"), ("the", "D"), ("mat", "N")]]
    assert (WORD_MIN_FREQ, PAPER_WORD_MIN_FREQ) == (2, 10) and PosDataConfig().word_min_freq == 2
    default = build_pos_dataset(train, dev, PosDataConfig(train="x"))
    assert default.words.itos[4:] == ["the", "cat", "dog", "sat", "mat"] and default.info["words"] == 9
    assert default.info["dev_unk_word_rate"] == pytest.approx(1 / 6)  # "on"
    paper = build_pos_dataset(train, dev, PosDataConfig(train="x", word_min_freq=PAPER_WORD_MIN_FREQ))
    assert paper.words.itos[4:] == ["the", "cat"] and paper.info["words"] == 6
    assert paper.info["dev_unk_word_rate"] == pytest.approx(4 / 6)  # dog, sat, on, mat
    # Singletons are unk in training too, so the unk vector the dev words get is a trained one
    assert (default.train.data.words == UNK).sum() == 2  # "on", "xylo"


def test_vocabulary_sizes_on_a_small_real_treebank(corpus):
    # ud-german-lit, UPOS, the seeded 10% split: 1,728 training sentences (the measurements behind WORD_MIN_FREQ)
    sizes = {}
    for min_freq in (2, 10):
        task = load_pos_dataset(PosDataConfig(train=str(corpus("ud-german-lit")), tag="upos", word_min_freq=min_freq,
                                              seed=0, cache=False))
        sizes[min_freq] = (task.info["train_sentences"], task.info["words"], round(task.info["dev_unk_word_rate"], 3))
    assert sizes == {2: (1728, 2549, 0.184), 10: (1728, 397, 0.335)}


def test_load_from_folder_with_split_and_cache(tmp_path):
    cache = ArrayCache(tmp_path / "cache")
    config = PosDataConfig(train=str(FIXTURES / "slash"), dev_fraction=0.34, word_min_freq=1, seed=1)
    first = load_pos_dataset(config, cache)
    assert first.info["cached"] is False and (first.info["train_sentences"], first.info["dev_sentences"]) == (2, 1)
    second = load_pos_dataset(config, cache)
    assert second.info["cached"] is True
    assert second.words == first.words and second.chars == first.chars and second.tags == first.tags
    for name, array in first.train.data.arrays().items():
        assert np.array_equal(array, second.train.data.arrays()[name])
    a, b = next(iter(first.train)), next(iter(second.train))
    assert a.keys() == b.keys() and a["tokens"] == b["tokens"]
    assert all(torch.equal(a[k], b[k]) for k in a if k != "tokens")
    other = load_pos_dataset(PosDataConfig(train=config.train, dev_fraction=0.34, word_min_freq=1, seed=2), cache)
    assert other.info["cached"] is False  # the seed changes the split, hence the key


@pytest.mark.parametrize("array, value, error", [
    ("train.tags", 200, r"train\.tags\.npy \(id 200 where the vocabulary has \d+ ids\)"),
    ("train.offsets", 0, r"train\.offsets\.npy \(offsets that do not run from 0 up to \d+ \(the length of "
                         r"train\.words\.npy\) without decreasing\)"),
    ("train.prefixes", 1, r"train\.prefixes\.npy \(its CRC-32 is 0x\w+, not the 0x\w+ written when it was prepared: "
                          r"the file changed since\)")])
def test_a_cached_array_damaged_in_content_is_named_and_rebuilt(tmp_path, array, value, error):
    """A POS entry is checked as an NMT one is: tags past the tag vocabulary (a worker's IndexError), offsets set to 0
    (every sentence empty), character ids all 1 (trained silently)."""
    cache = ArrayCache(tmp_path / "cache")
    config = PosDataConfig(train=str(FIXTURES / "slash"), dev_fraction=0.34, word_min_freq=1, seed=1)
    first = {name: np.array(a) for name, a in load_pos_dataset(config, cache).train.data.arrays().items()}  # copies
    (folder,) = (tmp_path / "cache").iterdir()
    mapped = np.load(folder / f"{array}.npy", mmap_mode="r+")
    mapped[:] = value
    mapped.flush()
    with pytest.warns(UserWarning, match=rf"^damaged cache entry {folder}/{error}: rebuilding it$"):
        again = load_pos_dataset(config, cache)
    assert again.info["cached"] is False
    assert all(np.array_equal(a, again.train.data.arrays()[name]) for name, a in first.items())


def test_separate_dev_file(tmp_path):
    config = PosDataConfig(train=str(FIXTURES / "tiny.conllu"), dev=str(FIXTURES / "tiny.conllu"), tag="xpos",
                           word_min_freq=1, cache=False, batch_size=2)
    task = load_pos_dataset(config)
    assert task.info["dev_sentences"] == task.info["train_sentences"] == 2
    assert task.tags.itos[2:] == ["$.", "APPR", "ART", "NN", "PPER", "VVFIN"]
    assert next(iter(task.train))["words"].shape == (2, 4)
    (tmp_path / "task").mkdir()
    task.save(tmp_path / "task")
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == [
        "data.json", "vocab.chars.json", "vocab.tags.json", "vocab.words.json"]


def test_eval_set_and_encode_sentences():
    config = PosDataConfig(train=str(FIXTURES / "slash"), dev=str(FIXTURES / "slash" / "ca01"), word_min_freq=1,
                           char_min_freq=1, cache=False)
    task = load_pos_dataset(config)
    test = task.eval_set(FIXTURES / "slash" / "ca02", batch_size=4)
    assert len(test) == 1 and test.data.num_tokens == 3
    batch = next(iter(test))
    assert task.tags.decode(batch["tags"][0].tolist()) == ["pps", "vbd", "."]
    raw = task.encode_sentences([["It", "rained", "."], ["The", "dog"]])
    assert torch.equal(raw["words"][0], batch["words"][0]) and torch.equal(raw["prefixes"][0], batch["prefixes"][0])
    assert raw["tags"].eq(-100).all() and raw["lengths"].tolist() == [3, 2]
    with pytest.raises(ValueError, match="no empty sentence"):
        task.encode_sentences([[]])


def test_bad_config_and_bad_corpus(tmp_path):
    with pytest.raises(ValueError, match="dev_fraction must be in"):
        PosDataConfig(train="x", dev_fraction=1.0)
    with pytest.raises(ValueError, match="word_min_freq must be >= 1"):
        PosDataConfig(train="x", word_min_freq=0)
    with pytest.raises(ValueError, match="format must be one of"):
        PosDataConfig(train="x", format="tiger-xml")
    with pytest.raises(CorpusError, match="corpus not found"):
        load_pos_dataset(PosDataConfig(train=str(tmp_path / "missing"), cache=False))


def test_synthetic_task_needs_characters():
    task = synthetic_pos_dataset(num_train=500, num_dev=50, seed=0)
    assert task.info["train_sentences"] == 500 and task.info["dev_sentences"] == 50
    assert task.info["dev_unk_word_rate"] > 0.4  # most content words are rare: only affixes identify them
    assert task.tags.itos[2:] and set(task.tags.itos[2:]) == {"DET", "PRON", "NOUN", "VERB", "ADJ", "ADV", "ADP",
                                                              "PART", "PUNCT"}
    batch = next(iter(task.train))
    assert batch["words"].shape[0] == 1 and batch["prefixes"].shape[2] == 10


@pytest.mark.corpora
def test_brown_task(corpus, tmp_path):
    config = PosDataConfig(train=str(corpus("brown")), seed=0)
    task = load_pos_dataset(config, ArrayCache(tmp_path))
    assert (task.info["train_sentences"], task.info["dev_sentences"]) == (51_606, 5_734)  # 90/10 of 57,340
    assert task.info["train_tokens"] + task.info["dev_tokens"] == 1_161_192
    assert len(task.train) == 51_606
    cached = load_pos_dataset(config, ArrayCache(tmp_path))
    assert cached.info["cached"] and cached.words == task.words
