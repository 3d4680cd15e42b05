"""The streamed, memory-mapped pipeline prepares exactly what the in-memory pipeline of commit fa3934d prepared from the
same corpora (tests/data/reference_corpus.py, recorded in reference_data.json): vocabularies, dropped counts, the
held-out split and its texts, every train and dev batch; fresh and from the cache, one chunk or many over a pool."""
import json
import pathlib

import numpy as np
import pytest

from hogwild.data import streamed_nmt
from hogwild.data.batch_set import BatchSet
from hogwild.data.cache import ArrayCache
from hogwild.data.mapped import is_mapped
from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
from hogwild.data.pos_dataset import PosDataConfig, load_pos_dataset
from tests.data import reference_corpus as corpus

REFERENCE = json.loads((pathlib.Path(__file__).parent / "reference_data.json").read_text(encoding="utf-8"))


def recorded(record: dict) -> dict:
    return json.loads(json.dumps(record, ensure_ascii=False))  # tuples as lists, as in the JSON file


@pytest.mark.parametrize("case", sorted(corpus.NMT_CASES))
def test_nmt_data_equal_the_recorded_ones(tmp_path, case):
    corpus.write_parallel(tmp_path)
    dataset = load_nmt_dataset(NmtDataConfig(**corpus.nmt_settings(case, tmp_path), processes=1))
    assert recorded(corpus.nmt_record(dataset)) == REFERENCE["nmt"][case]


def test_nmt_data_from_the_cache_and_over_a_pool_of_small_chunks_equal_the_recorded_ones(tmp_path, monkeypatch):
    """Chunks of 7 pairs over 2 processes, read back 9 pairs at a time: the merge of chunk types, the first
    appearances and the held-out pairs straddling blocks; then the same entry read back from the cache."""
    monkeypatch.setattr(streamed_nmt, "CHUNK_PAIRS", 7)
    monkeypatch.setattr(streamed_nmt, "POOL_PAIRS", 14)
    monkeypatch.setattr(streamed_nmt, "BLOCK_PAIRS", 9)
    corpus.write_parallel(tmp_path)
    settings = dict(corpus.nmt_settings("moses-holdout", tmp_path), cache=True, processes=2)
    cache = ArrayCache(tmp_path / "cache")
    cold = load_nmt_dataset(NmtDataConfig(**settings), cache)
    warm = load_nmt_dataset(NmtDataConfig(**settings), cache)
    assert (cold.info["cached"], warm.info["cached"]) == (False, True)
    for dataset in (cold, warm):
        assert recorded(corpus.nmt_record(dataset)) == REFERENCE["nmt"]["moses-holdout"]
        assert all(is_mapped(array) for array in dataset.train.data.arrays().values())
        assert dataset.train.data.src.dtype == np.uint16 and dataset.train.data.src_offsets.dtype == np.int64
    (entry,) = (tmp_path / "cache").iterdir()  # the arrays, meta.json, nothing provisional left
    assert sorted(path.name for path in entry.iterdir()) == sorted(
        [f"{part}.{side}{kind}.npy" for part in ("train", "dev") for side in ("src", "tgt")
         for kind in ("", "_offsets")] + ["meta.json"])


def test_pos_data_equal_the_recorded_ones_fresh_and_cached(tmp_path):
    path = corpus.write_tagged(tmp_path)
    cache = ArrayCache(tmp_path / "cache")
    for cached in (False, True):
        dataset = load_pos_dataset(PosDataConfig(**dict(corpus.pos_settings("slash-holdout", path), cache=True)), cache)
        assert dataset.info["cached"] is cached
        assert recorded(corpus.pos_record(dataset)) == REFERENCE["pos"]["slash-holdout"]
        assert all(is_mapped(array) for array in dataset.train.data.arrays().values())


def test_a_batch_set_holds_the_batchers_batches(tmp_path):
    corpus.write_parallel(tmp_path)
    dataset = load_nmt_dataset(NmtDataConfig(**corpus.nmt_settings("moses-nolimit", tmp_path), processes=1))
    batches = BatchSet(dataset.train)
    assert [corpus.batch_record(batch) for batch in batches] == REFERENCE["nmt"]["moses-nolimit"]["train"]
    assert [corpus.batch_record(batch) for batch in batches[1::3]] == REFERENCE["nmt"]["moses-nolimit"]["train"][1::3]
