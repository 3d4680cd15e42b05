"""data/buckets.py: the one padding rule (smallest edge that holds a length, then a multiple), its vectorised form,
the training runs' policy, and a batcher padding by edges and a multiple at once as the former two mechanisms did
(the batcher's edges, then pad_lengths as a BatchSet transform: --compile on NMT)."""
import numpy as np
import pytest
import torch

from hogwild.data.batching import pad_lengths
from hogwild.data.buckets import NMT_STEP, POS_EDGES, LengthBuckets, training_buckets
from hogwild.data.nmt_dataset import synthetic_nmt_dataset


def test_a_length_goes_to_the_smallest_edge_that_holds_it_then_to_a_multiple():
    edges = LengthBuckets((8, 16, 24))
    assert [edges.length(n) for n in (1, 8, 9, 24, 25, 40)] == [8, 8, 16, 24, 25, 40]  # past the last: its own
    both = LengthBuckets((8, 16, 24), multiple=5)
    assert [both.length(n) for n in (1, 9, 17, 25, 26)] == [10, 20, 25, 25, 30]
    assert [LengthBuckets(multiple=8).length(n) for n in (1, 8, 9)] == [8, 8, 16]
    n = np.arange(1, 60)
    for buckets in (edges, both, LengthBuckets(multiple=3), LengthBuckets()):
        assert buckets.lengths(n).tolist() == [buckets.length(int(k)) for k in n]
        assert buckets.lengths(n.reshape(-1, 1)).shape == (59, 1)


def test_a_multiple_below_one_is_refused():
    with pytest.raises(ValueError, match="multiple must be >= 1, got 0"):
        LengthBuckets(multiple=0)


def test_training_runs_get_the_task_edges_when_shapes_must_repeat_and_nmt_its_multiple():
    assert training_buckets("pos", fixed_shapes=True) == LengthBuckets(POS_EDGES)
    assert training_buckets("pos", fixed_shapes=False) is None
    assert training_buckets("nmt", True, max_len=50) == LengthBuckets(tuple(range(NMT_STEP, 57, NMT_STEP)))
    assert training_buckets("nmt", True, max_len=50).edges[-1] == 56  # holds 50 words + bos + eos
    assert training_buckets("nmt", True, 50, multiple=8).multiple == 8
    assert training_buckets("nmt", False, 50, multiple=8) == LengthBuckets(multiple=8)
    assert training_buckets("nmt", False, 50, multiple=1) is None


@pytest.mark.parametrize("multiple", [5, 8])
def test_edges_and_a_multiple_in_one_batcher_pad_as_edges_then_pad_lengths_did(multiple):
    batcher = synthetic_nmt_dataset(num_train=300, seed=4, batch_size=16).train
    edges = (8, 12, 16, 24)
    former = batcher.with_buckets(LengthBuckets(edges))
    one = batcher.with_buckets(LengthBuckets(edges, multiple))
    shapes = set()
    for old, new in zip(former, one):
        padded = pad_lengths(old, multiple)
        assert padded.keys() == new.keys() and padded["tokens"] == new["tokens"]
        assert all(torch.equal(padded[key], new[key]) for key in ("src", "src_mask", "tgt", "tgt_mask"))
        shapes.add((new["src"].shape[1], new["tgt"].shape[1]))
    assert len(shapes) > 1 and all(s % multiple == 0 and t % multiple == 0 for s, t in shapes)
    assert batcher.buckets is None and len(one) == len(batcher)  # a copy: the dataset's batcher is unchanged
