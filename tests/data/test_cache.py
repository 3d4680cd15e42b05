"""ArrayCache: round trips, keys that follow files and settings, damaged entries, the environment variable."""
import os

import numpy as np
import pytest

from hogwild.data.cache import ArrayCache, cache_root


def test_store_load_round_trip(tmp_path):
    cache = ArrayCache(tmp_path / "c")
    source = tmp_path / "corpus.txt"
    source.write_text("x")
    extra = tmp_path / "spm.model"
    extra.write_bytes(b"model")
    key = cache.key("pos", [source], {"min_freq": 10})
    assert key.startswith("pos-") and cache.load(key) is None
    arrays = {"a": np.arange(5, dtype=np.int64), "b": np.ones((2, 3), dtype=np.int64)}
    folder = cache.store(key, arrays, {"info": {"n": 5}}, {"spm.src.model": extra})
    loaded, meta, where = cache.load(key)
    assert where == folder and (folder / "spm.src.model").read_bytes() == b"model"
    assert loaded.keys() == arrays.keys() and all(np.array_equal(loaded[k], arrays[k]) for k in arrays)
    assert meta["info"] == {"n": 5}
    assert [p.name for p in (tmp_path / "c").iterdir()] == [key]  # no temporary folders left


def test_key_follows_file_size_mtime_and_settings(tmp_path):
    cache = ArrayCache(tmp_path)
    source = tmp_path / "corpus.txt"
    source.write_text("abc")
    key = cache.key("nmt", [source], {"vocab_size": 100})
    assert cache.key("nmt", [source], {"vocab_size": 100}) == key
    assert cache.key("nmt", [source], {"vocab_size": 101}) != key
    assert cache.key("pos", [source], {"vocab_size": 100}) != key
    os.utime(source, ns=(1, 1))
    assert cache.key("nmt", [source], {"vocab_size": 100}) != key


def test_damaged_entry_is_a_miss_and_disabled_cache_does_nothing(tmp_path):
    cache = ArrayCache(tmp_path)
    folder = cache.store("k", {"a": np.zeros(3)}, {})
    (folder / "a.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match=f"damaged cache entry {folder} "):
        assert cache.load("k") is None
    assert not folder.exists() and list(tmp_path.iterdir()) == []  # removed, so that the next store replaces it
    assert cache.store("k", {"a": np.zeros(3)}, {}) == folder and cache.load("k")[1] == {"__arrays__": ["a"]}
    off = ArrayCache(tmp_path / "off", enabled=False)
    assert off.store("k", {"a": np.zeros(3)}, {}) is None and off.load("k") is None
    assert not (tmp_path / "off").exists()


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOGWILD_CACHE", str(tmp_path))
    assert cache_root() == tmp_path and ArrayCache().root == tmp_path
    monkeypatch.delenv("HOGWILD_CACHE")
    assert cache_root().parts[-2:] == (".cache", "hogwild")
