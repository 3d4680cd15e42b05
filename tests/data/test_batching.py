"""Batchers: exact batch tensors, the batch contract of data/batching.py's docstring, determinism per seed, coverage
and length bucketing."""
import numpy as np
import pytest
import torch

from hogwild.data.batching import NmtBatcher, ParallelData, PosBatcher, TaggedData, pad_lengths
from hogwild.data.buckets import LengthBuckets
from hogwild.data.synthetic import synthetic_parallel
from hogwild.data.vocab import TAG_SPECIALS, Vocabulary

SENTENCES = [[("the", "D"), ("dog", "N")], [("a", "D"), ("cat", "N"), ("runs", "V")], [("dogs", "N")]]


def pos_data():
    words = Vocabulary.build([[w for w, _ in s] for s in SENTENCES])
    chars = Vocabulary.build([w for s in SENTENCES for w, _ in s])
    tags = Vocabulary.build([[t for _, t in s] for s in SENTENCES], specials=TAG_SPECIALS)
    return TaggedData.tensorize(SENTENCES, words, chars, tags), words, chars, tags


def test_pos_batch_layout():
    data, words, chars, tags = pos_data()
    assert data.offsets.tolist() == [0, 2, 5, 6] and data.num_tokens == 6
    batch = PosBatcher(data, batch_size=2, shuffle=False).batch([0, 1])
    assert set(batch) == {"words", "prefixes", "suffixes", "tags", "lengths", "tokens"}
    assert all(batch[k].dtype == torch.int64 for k in batch if k != "tokens")
    assert type(batch["tokens"]) is int and batch["tokens"] == 5  # a host-side count, never moved to a device
    assert batch["words"].tolist() == [words.encode(["the", "dog"]) + [0], words.encode(["a", "cat", "runs"])]
    assert batch["tags"].tolist() == [tags.encode(["D", "N"]) + [-100], tags.encode(["D", "N", "V"])]
    assert batch["lengths"].tolist() == [2, 3]
    assert batch["prefixes"].shape == batch["suffixes"].shape == (2, 3, 10)
    runs = chars.encode("runs")
    assert batch["prefixes"][1, 2].tolist() == runs + [0] * 6
    assert batch["suffixes"][1, 2].tolist() == [0] * 6 + runs
    assert batch["prefixes"][0, 2].tolist() == [0] * 10  # padded position


def test_pos_single_sentence_batches_cover_the_corpus_once_per_epoch():
    data = pos_data()[0]
    batcher = PosBatcher(data, batch_size=1, seed=3)
    assert len(batcher) == 3
    lengths = [b["lengths"].tolist() for b in batcher.batches()]
    assert sorted(lengths) == [[1], [2], [3]]
    plans = [np.concatenate(PosBatcher(data, batch_size=1, seed=seed).plan()).tolist() for seed in range(6)]
    assert all(sorted(p) == [0, 1, 2] for p in plans) and len({tuple(p) for p in plans}) > 1  # the seed orders


def test_pos_batches_are_deterministic_for_a_seed():
    data = pos_data()[0]
    first = [b["words"] for b in PosBatcher(data, 2, seed=7).batches()]
    again = [b["words"] for b in PosBatcher(data, 2, seed=7)]
    assert len(first) == 2 and all(torch.equal(a, b) for a, b in zip(first, again))


def nmt_data(n=500):
    pairs = synthetic_parallel(n, seed=0)
    src, tgt = Vocabulary.build([s for s, _ in pairs]), Vocabulary.build([t for _, t in pairs])
    return ParallelData.tensorize(pairs, src, tgt), pairs, src, tgt


def test_nmt_batch_layout():
    data, pairs, src, tgt = nmt_data(3)
    batch = NmtBatcher(data, batch_size=3, shuffle=False).batch([0, 1, 2])
    assert set(batch) == {"src", "src_mask", "tgt", "tgt_mask", "tokens"}
    assert type(batch["tokens"]) is int and batch["tokens"] == sum(len(t) + 1 for _, t in pairs)  # words + eos
    for row, (s, t) in enumerate(pairs):
        n, m = len(s), len(t)
        assert batch["src"][row, :n + 1].tolist() == src.encode(s, eos=True)
        assert batch["tgt"][row, :m + 2].tolist() == tgt.encode(t, bos=True, eos=True)
        assert batch["src"][row, n + 1:].eq(0).all() and batch["tgt"][row, m + 2:].eq(0).all()
        assert batch["src_mask"][row].sum() == n + 1 and batch["tgt_mask"][row].sum() == m + 2
    assert batch["src"].shape[1] == max(len(s) for s, _ in pairs) + 1
    assert batch["src_mask"].dtype == torch.bool and batch["tgt"].dtype == torch.int64
    assert tgt.decode(batch["tgt"][0].tolist()) == pairs[0][1]


def test_nmt_epoch_covers_every_pair_once_with_less_padding_than_random():
    data = nmt_data(2000)[0]
    bucketed, plain = NmtBatcher(data, batch_size=64, seed=1, pool_batches=10), NmtBatcher(data, 64, shuffle=False)
    plan = bucketed.plan()
    assert sorted(np.concatenate(plan).tolist()) == list(range(2000)) and len(plan) == len(bucketed) == 32

    def padding(batcher):
        return sum(int((~b["src_mask"]).sum()) for b in batcher)
    assert padding(bucketed) < padding(plain) / 3


def test_nmt_plans_are_a_function_of_the_seed():
    data = nmt_data(300)[0]
    a, b = NmtBatcher(data, 16, seed=5), NmtBatcher(data, 16, seed=5)
    assert [x.tolist() for x in a.plan()] == [x.tolist() for x in b.plan()] == [x.tolist() for x in a.plan()]
    assert [x.tolist() for x in a.plan()] != [x.tolist() for x in NmtBatcher(data, 16, seed=6).plan()]
    assert all(torch.equal(x["src"], y["src"]) for x, y in zip(a.batches(), b))
    unshuffled = NmtBatcher(data, 16, shuffle=False).plan()
    assert np.concatenate(unshuffled).tolist() == list(range(300))  # dev order = reference order


def test_bad_batcher_arguments():
    data = pos_data()[0]
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        PosBatcher(data, batch_size=0)
    with pytest.raises(ValueError, match="inconsistent TaggedData"):
        TaggedData(data.words[:-1], data.prefixes, data.suffixes, data.tags, data.offsets)
    empty = ParallelData(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="cannot batch an empty corpus"):
        NmtBatcher(empty)


def test_pos_bucket_edges_pad_each_batch_to_its_edge():
    data = pos_data()[0]  # sentence lengths 2, 3, 1
    plain = PosBatcher(data, batch_size=1, shuffle=False).batches()
    bucketed = PosBatcher(data, batch_size=1, shuffle=False, buckets=LengthBuckets((2, 4))).batches()
    assert [b["words"].shape[1] for b in bucketed] == [2, 4, 2]
    for tight, padded in zip(plain, bucketed):
        n = tight["words"].shape[1]
        assert torch.equal(padded["lengths"], tight["lengths"]) and padded["tokens"] == tight["tokens"]
        for key in ("words", "prefixes", "suffixes", "tags"):
            assert torch.equal(padded[key][:, :n], tight[key])
        assert padded["words"][:, n:].eq(0).all() and padded["tags"][:, n:].eq(-100).all()
        assert padded["prefixes"][:, n:].eq(0).all() and padded["suffixes"][:, n:].eq(0).all()
    beyond = PosBatcher(data, batch_size=1, shuffle=False, buckets=LengthBuckets((2,))).batches()
    assert [b["words"].shape[1] for b in beyond] == [2, 3, 2]  # past the last edge: the batch's own length


def test_nmt_bucket_edges_pad_source_and_target_apart():
    data, pairs = nmt_data(40)[:2]
    edges = (8, 12, 16, 24, 32)
    plain, bucketed = NmtBatcher(data, 8, seed=2), NmtBatcher(data, 8, seed=2, buckets=LengthBuckets(edges))
    for tight, padded in zip(plain, bucketed):
        s, t = tight["src"].shape[1], tight["tgt"].shape[1]
        assert padded["src"].shape[1] == min(e for e in edges if e >= s)
        assert padded["tgt"].shape[1] == min(e for e in edges if e >= t)
        assert torch.equal(padded["src"][:, :s], tight["src"]) and not padded["src_mask"][:, s:].any()
        assert torch.equal(padded["tgt"][:, :t], tight["tgt"]) and not padded["tgt_mask"][:, t:].any()
        assert padded["tokens"] == tight["tokens"] == int(padded["tgt_mask"][:, 1:].sum())
    assert len({(b["src"].shape[1], b["tgt"].shape[1]) for b in bucketed}) <= len(edges) ** 2
    assert pad_lengths(next(iter(bucketed)), 8)["tokens"] == next(iter(bucketed))["tokens"]


@pytest.mark.parametrize("edges", [(0, 4), (4, 4), (8, 4)])
def test_bad_bucket_edges_are_refused(edges):
    with pytest.raises(ValueError, match="bucket edges must be increasing lengths >= 1"):
        LengthBuckets(edges)
