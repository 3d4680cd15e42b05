"""hogwild.share.batch_store: batches come back exactly (values, dtypes, shapes, structure), their plain tensors as
views of one mapped flat tensor per dtype, everything else pickled as usual; the mapping outlives the files."""
import os
from collections import namedtuple

import pytest
import torch

from hogwild.share.batch_store import BatchStore

Pair = namedtuple("Pair", "source target")


def _batches():
    shared = torch.tensor([7, 8, 9])
    grid = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    return [
        {"words": torch.tensor([[1, 2, 3]]), "mask": torch.tensor([[True, False, True]]), "lengths": shared,
         "name": "first", "n": 3, "scale": 0.5, "none": None},
        (grid.t(), grid[:, 1], torch.tensor(5), torch.zeros(0, 3), torch.full((2,), 1.5, dtype=torch.float16)),
        [shared, Pair(torch.tensor([4], dtype=torch.uint8), torch.tensor([[0.25, -1.0]]))],
    ]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert type(b) is type(a) and b.dtype == a.dtype and b.shape == a.shape and torch.equal(b, a)
    elif isinstance(a, dict):
        assert list(b) == list(a)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(b) is type(a) and len(b) == len(a)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert b == a


def test_batches_come_back_exactly_with_their_tensors_as_views_of_one_flat_tensor_per_dtype(tmp_path):
    batches = _batches()
    store = BatchStore(batches, str(tmp_path))
    loaded = store.load()
    assert store.length == 3 and type(loaded) is list
    _same(batches, loaded)
    assert loaded[1][0].stride() == (1, 4) and loaded[1][1].stride() == (4,)  # grid.t() and grid[:, 1], as views
    int64 = [loaded[0]["words"], loaded[0]["lengths"], loaded[1][0], loaded[1][1], loaded[1][2]]
    assert len({t.untyped_storage().data_ptr() for t in int64}) == 1  # one mapped int64 tensor
    # in packing order: words (3), lengths (3), grid's storage (12: grid.t() at its start, grid[:, 1] one on), 5 (1)
    assert [t.storage_offset() for t in int64] == [0, 3, 6, 7, 18]
    assert torch.load(store.path)["int64"].numel() == 19
    assert loaded[2][0] is loaded[0]["lengths"]  # one tensor in two batches stays one (packed once)


def test_overlapping_views_pack_their_storage_once_and_share_it_again(tmp_path):
    corpus = torch.arange(1000)
    windows = [{"input": corpus[i:i + 50], "target": corpus[i + 1:i + 51]} for i in range(0, 949, 7)]
    store = BatchStore(windows, str(tmp_path))
    assert torch.load(store.path)["int64"].numel() == 1000  # not 2 x 136 x 50
    loaded = store.load()
    _same(windows, loaded)
    assert len({w[key].untyped_storage().data_ptr() for w in loaded for key in w}) == 1
    assert loaded[3]["target"].storage_offset() == 22


def test_tensors_that_cannot_be_views_are_pickled_as_usual(tmp_path):
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    tracked = torch.tensor([3.0], requires_grad=True)
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 4.0], (3,), check_invariants=True)
    loaded = BatchStore([(weight, tracked, sparse, torch.tensor([1]))], str(tmp_path)).load()[0]
    assert type(loaded[0]) is torch.nn.Parameter and loaded[0].tolist() == [1.0, 2.0]
    assert loaded[1].requires_grad and loaded[1].tolist() == [3.0]
    assert loaded[2].is_sparse and loaded[2].to_dense().tolist() == [1.0, 0.0, 4.0]
    assert loaded[3].tolist() == [1]


def test_the_mapping_outlives_the_files(tmp_path):
    store = BatchStore([{"x": torch.arange(3)}, {"x": torch.arange(2)}], str(tmp_path))
    loaded = store.load()
    if os.path.exists("/proc/self/maps"):  # Linux: the flat tensors are mapped from the file, not read into memory
        with open("/proc/self/maps") as maps:
            assert store.path in maps.read()
    store.remove()
    assert not list(tmp_path.iterdir())
    assert loaded[0]["x"].tolist() == [0, 1, 2] and loaded[1]["x"].tolist() == [0, 1]
    store.remove()  # twice is harmless
    with pytest.raises(FileNotFoundError):
        store.load()


def _mapped_from(tensor, path):
    """Whether the tensor's memory lies in a mapping of the file `path` (/proc/self/maps; True where there is none)."""
    if not os.path.exists("/proc/self/maps"):
        return True
    with open("/proc/self/maps") as maps:
        spans = [line.split()[0].split("-") for line in maps if line.rstrip().endswith(" " + path)]
    return any(int(start, 16) <= tensor.data_ptr() < int(end, 16) for start, end in spans)


class Windows(torch.utils.data.Dataset):
    """Batches built on demand from a tensor the dataset holds (packed by the store, a view in the worker)."""

    def __init__(self, corpus):
        self.corpus = corpus

    def __len__(self):
        return len(self.corpus) - 1

    def __getitem__(self, index):
        return {"input": self.corpus[index:index + 1] * 10, "index": index}


def test_a_dataset_is_stored_as_itself_and_indexed_after_loading(tmp_path):
    """A torch Dataset is not listed: the store pickles the object (its tensors packed as usual) and load returns it."""
    dataset = Windows(torch.arange(100_000))
    store = BatchStore(dataset, str(tmp_path))
    loaded = store.load()
    assert type(loaded) is Windows and store.length == len(loaded) == 99_999
    assert loaded[5] == {"input": torch.tensor([50]), "index": 5}
    assert torch.equal(loaded.corpus, dataset.corpus) and _mapped_from(loaded.corpus, store.path)
    assert os.path.getsize(store.structure) < 1000  # the structure, not 99,999 batches
    assert torch.load(store.path)["int64"].numel() == 100_000  # the corpus once


def test_a_dataset_that_cannot_be_pickled_is_named_with_what_to_change(tmp_path):
    """hogwild.train on a Dataset holding a lambda failed with pickle's bare "AttributeError: Can't pickle local
    object 'Batches.__init__.<locals>.<lambda>'"."""
    class Batches(torch.utils.data.Dataset):
        def __init__(self):
            self.transform = lambda batch: batch

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return self.transform(torch.zeros(1))

    with pytest.raises(TypeError, match=r"^cannot send the Batches Dataset to the workers \(each gets it pickled, as "
                                        r"DataLoader's workers do\): Can't pickle local object .*\. Keep lambdas, "
                                        r"local functions and classes, open files and locks out of them"):
        BatchStore(Batches(), str(tmp_path))
