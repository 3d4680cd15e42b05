"""data/batch_set.py's BatchSet tells its batches' shapes from the batcher's offsets and plan, without building a
batch: the same signatures, first batches and counts as building every batch finds (hogwild/worker/step_graph.py's
shape_counts, what a device worker captures graphs for) and the same largest batch (its sparse-row buffers), on
seeded corpora, with and without length buckets, for a slice too."""
import numpy as np
import pytest
import torch

from hogwild.data.batch_set import BatchSet, _row_keys
from hogwild.data.batching import PosBatcher
from hogwild.data.buckets import LengthBuckets, training_buckets
from hogwild.data.nmt_dataset import synthetic_nmt_dataset
from hogwild.data.pos_dataset import synthetic_pos_dataset
from hogwild.worker.step_graph import id_capacity, shape_counts

BUCKETS = [None, LengthBuckets((8, 16)), LengthBuckets((6, 9, 14), multiple=4), LengthBuckets(multiple=5)]


def integer_elements(batch: dict) -> int:
    return sum(t.numel() for t in batch.values() if torch.is_tensor(t) and t.dtype in (torch.int64, torch.int32))


@pytest.mark.parametrize("buckets", BUCKETS + ["training"])
@pytest.mark.parametrize("task", ["pos", "nmt"])
def test_the_shapes_a_batch_set_tells_are_those_of_its_built_batches(task, buckets, monkeypatch):
    if task == "pos":  # 167 batches of 3 sentences, the last of 2
        batcher = synthetic_pos_dataset(num_train=500, seed=1, batch_size=3).train
    else:  # 44 batches of 16 pairs, the last of 12, sorted by length in pools
        batcher = synthetic_nmt_dataset(num_train=700, seed=2, batch_size=16).train
    if buckets == "training":
        buckets = training_buckets(task, fixed_shapes=True, max_len=50)
    batches = BatchSet(batcher.with_buckets(buckets))
    built = [batches[i] for i in range(len(batches))]
    builds = []
    monkeypatch.setattr(type(batcher), "batch", lambda self, indices: builds.append(indices))
    for part, part_built in ((batches, built), (batches[1::3], built[1::3])):
        told = shape_counts(part)
        assert told == shape_counts(part_built)  # signatures, first batches and counts, ranked alike
        assert id_capacity(told) == max(integer_elements(batch) for batch in part_built)
        assert sum(count for _, _, count in told) == len(part) and len(told) > 1
    assert builds == []  # told from the offsets: no batch built


def test_a_batch_set_ranks_its_shapes_by_first_appearance_with_exact_counts():
    batcher = synthetic_pos_dataset(num_train=20, seed=3, batch_size=4).train.with_buckets(LengthBuckets((8, 16)))
    batches = BatchSet(batcher)
    told = batches.batch_shapes()
    shapes = [tuple(batch["words"].shape) for batch in batches]
    assert [(first, count) for first, count, _ in told] == [(shapes.index(s), shapes.count(s)) for s in
                                                           dict.fromkeys(shapes)]
    assert all(like["words"].device.type == "meta" and tuple(like["words"].shape) == shapes[first]
               for first, _, like in told)


def test_rows_too_wide_for_one_integer_key_are_still_told_apart():
    wide = np.array([[2**62, 3], [2**62, 3], [1, 3], [1, 4]])
    narrow = np.array([[1, 3], [1, 3], [2, 3], [1, 4]])
    for sizes in (wide, narrow):
        keys = _row_keys(sizes)
        assert keys[0] == keys[1] and len(set(keys.tolist())) == 3


def test_starts_that_are_not_whole_batches_are_refused():
    batcher = PosBatcher(synthetic_pos_dataset(num_train=20, seed=3).train.data, batch_size=4)
    with pytest.raises(ValueError, match="multiples of batch_size 4"):
        batcher.padded_sizes(np.arange(20), np.array([0, 2]))
