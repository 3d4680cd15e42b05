"""ArrayCache: round trips, keys that follow files and settings, damaged entries, the environment variable, and a
cache that cannot be written (read-only, full, under a plain file): a warning, and the corpus is read instead."""
import errno
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import warnings
import zlib

import numpy as np
import pytest

from hogwild.data.cache import CACHE_VERSION, ArrayCache, CacheWarning, cache_root, read_entry
from tests.tasks.helpers import REPO


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


def test_a_corpus_edited_with_its_size_and_mtime_put_back_gets_another_key(tmp_path):
    """`sed -i` then `touch -r` (a new file renamed over the corpus), or an edit in place with its mtime put back,
    reused the old entry: the key had path, size and mtime only. The inode and the change time tell them apart."""
    cache = ArrayCache(tmp_path)
    source = tmp_path / "corpus.txt"
    source.write_text("le chat\n")
    before = source.stat()
    key = cache.key("nmt", [source], {})
    edited = tmp_path / "sed-tmp"
    edited.write_text("le chien\n"[:len("le chat\n")])
    os.replace(edited, source)  # what sed -i does
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
    assert source.stat().st_size == before.st_size and source.stat().st_mtime_ns == before.st_mtime_ns
    assert cache.key("nmt", [source], {}) != key
    key = cache.key("nmt", [source], {})
    time.sleep(0.05)  # the change time moves by the kernel's tick
    source.write_text("la pomme\n")
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cache.key("nmt", [source], {}) != key


def test_damaged_entry_is_a_miss_and_disabled_cache_does_nothing(tmp_path):
    cache = ArrayCache(tmp_path)
    folder = cache.store("k", {"a": np.zeros(3)}, {})
    (folder / "a.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match=f"damaged cache entry {folder}/a.npy "):
        assert cache.load("k") is None
    assert not folder.exists() and list(tmp_path.iterdir()) == []  # removed, so that the next store replaces it
    assert cache.store("k", {"a": np.zeros(3)}, {}) == folder
    assert cache.load("k")[1] == {"__arrays__": ["a"], "__crc32__": {"a": zlib.crc32((folder / "a.npy").read_bytes())},
                                  "__version__": CACHE_VERSION}
    off = ArrayCache(tmp_path / "off", enabled=False)
    assert off.store("k", {"a": np.zeros(3)}, {}) is None and off.load("k") is None
    assert not (tmp_path / "off").exists()


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOGWILD_CACHE", str(tmp_path))
    assert cache_root() == tmp_path and ArrayCache().root == tmp_path
    monkeypatch.delenv("HOGWILD_CACHE")
    assert cache_root().parts[-2:] == (".cache", "hogwild")


@pytest.mark.parametrize("how, error", [
    ("0-byte", r"/a\.npy \(EOFError: No data left in file\)"),
    ("truncated", r"/a\.npy \(ValueError: mmap length is greater than file size\)"),
    ("a plain file", r" \(not a folder\)")])
def test_a_broken_entry_is_named_once_and_rebuilt(tmp_path, how, error):
    cache = ArrayCache(tmp_path)
    folder = cache.store("k", {"a": np.arange(1000)}, {})
    if how == "0-byte":
        (folder / "a.npy").write_bytes(b"")
    elif how == "truncated":
        data = (folder / "a.npy").read_bytes()
        (folder / "a.npy").write_bytes(data[: len(data) // 2])
    else:
        shutil.rmtree(folder)
        folder.write_text("not an entry\n")
    with pytest.warns(CacheWarning) as caught:
        assert cache.load("k") is None
    assert len(caught) == 1
    assert re.fullmatch(rf"damaged cache entry {re.escape(str(folder))}{error}: rebuilding it",
                        str(caught[0].message))
    assert not folder.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.store("k", {"a": np.arange(1000)}, {}) == folder
        assert np.array_equal(cache.load("k")[0]["a"], np.arange(1000))


def test_a_plain_file_at_the_entry_path_is_replaced_by_the_store(tmp_path):
    cache = ArrayCache(tmp_path)
    cache.path("k").write_text("not an entry\n")  # e.g. what a user's script left there
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.store("k", {"a": np.arange(3)}, {}) == cache.path("k")
    assert np.array_equal(cache.load("k")[0]["a"], np.arange(3))


def test_a_cache_under_a_plain_file_or_proc_is_skipped_with_one_warning(tmp_path):
    (tmp_path / "a-file").write_text("x\n")
    for root in (tmp_path / "a-file", pathlib.Path("/proc/hogwild-cache")):
        cache = ArrayCache(root)
        with pytest.warns(CacheWarning) as caught:
            assert cache.store("k", {"a": np.arange(3)}, {}) is None
        reason = "Not a directory" if root.name == "a-file" else "No such file or directory"
        assert [str(w.message) for w in caught] == [
            f"cannot write the cache entry {root / 'k'} ({reason}): training from the corpus without caching it (set "
            f"HOGWILD_CACHE to a writable folder to cache it)"]
        assert cache.load("k") is None


def test_a_full_disk_while_storing_is_one_warning_and_leaves_no_partial_entry(tmp_path, monkeypatch):
    """Simulated (the real one, a tiny tmpfs, is test_a_read_only_or_full_cache_trains_from_the_corpus): the writer
    raising ENOSPC half way."""
    cache = ArrayCache(tmp_path)
    writes = []

    def save(path, array, allow_pickle):
        if writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        writes.append(path)
        real_save(path, array, allow_pickle=allow_pickle)
    real_save = np.save
    monkeypatch.setattr(np, "save", save)
    with pytest.warns(CacheWarning, match=rf"^cannot write the cache entry {re.escape(str(tmp_path / 'k'))} "
                                          r"\(No space left on device; [\d,]+ bytes free there\): training from the corpus"):
        assert cache.store("k", {"a": np.arange(3), "b": np.arange(4)}, {}) is None
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone


def test_a_cache_without_room_for_what_a_build_needs_is_not_tried(tmp_path, monkeypatch):
    """A full cache disk ran the whole NMT preparation twice (37.7 s against 21.4 s): into the cache until the disk
    filled, then again in a temporary folder. With less room free than it needs at least, the build goes straight
    to the temporary folder, once, with the one warning."""
    import types

    from hogwild.data import cache as cache_module, nmt_dataset
    from hogwild.data.streamed_nmt import prepare_nmt
    monkeypatch.setattr(cache_module.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=999))
    written = []

    def write(folder):
        written.append(folder)
        np.save(folder / "a.npy", np.arange(3))
        return {}

    with pytest.warns(CacheWarning) as caught:
        folder, stored = ArrayCache(tmp_path).build("nmt-k", write, need=5_000)
    assert [str(w.message) for w in caught] == [
        f"cannot write the cache entry {tmp_path / 'nmt-k'} (No space left on device for the about 5,000 bytes it "
        f"needs; 999 bytes free there): training from the corpus without caching it (set HOGWILD_CACHE to a writable "
        f"folder to cache it)"]
    assert written == [folder] and not stored and folder.parent != tmp_path and list(tmp_path.iterdir()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ArrayCache(tmp_path).build("nmt-k", write, need=900)[1]  # room enough: stored
    prepared = []
    monkeypatch.setattr(nmt_dataset, "prepare_nmt", lambda *args: prepared.append(1) or prepare_nmt(*args))
    for lang in ("fr", "en"):
        (tmp_path / f"train.{lang}").write_text("".join(f"le chat {i} dort\n" for i in range(100)))
    with pytest.warns(CacheWarning, match="No space left on device for the about 1,"):
        dataset = nmt_dataset.load_nmt_dataset(nmt_dataset.NmtDataConfig(train=str(tmp_path / "train"), processes=1),
                                               ArrayCache(tmp_path / "cache"))
    assert prepared == [1] and dataset.info["train_pairs"] == 90


def test_an_nmt_preparation_asks_for_about_half_its_texts_bytes(tmp_path):
    from hogwild.data.streamed_nmt import preparation_bytes
    (tmp_path / "train.fr").write_bytes(b"x" * 1000)
    (tmp_path / "train.en.xz").write_bytes(b"x" * 100)
    assert preparation_bytes([tmp_path / "train.fr", tmp_path / "train.en.xz"]) == (1000 + 300) // 2


CORPUS_SCRIPT = """
import json, sys, warnings
from hogwild.data.cache import ArrayCache
from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
config = NmtDataConfig(train=sys.argv[1], dev=sys.argv[2], subwords="bpe", subword_vocab_size=60, processes=1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    task = load_nmt_dataset(config, ArrayCache(sys.argv[3]))
print(json.dumps({"warnings": [str(w.message) for w in caught], "cached": task.info["cached"],
                  "pairs": task.info["train_pairs"], "decoded": task.decode(task.dev.batch([0])["tgt"][0].tolist())}))
"""


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_a_read_only_or_full_cache_trains_from_the_corpus(tmp_path, kind):
    """A real read-only HOGWILD_CACHE (chmod, or as root a read-only bind mount) and a real full disk (a 64 KiB
    tmpfs: the arrays do not fit): one warning naming the entry, the dataset built from the corpus, sentencepiece
    models trained outside the cache."""
    for lang, text in (("fr", "Le chat numéro {} dort, n'est-ce pas ?"), ("en", "The cat number {} sleeps.")):
        lines = "".join(text.format(i) + "\n" for i in range(3000 if kind == "full" else 60))
        (tmp_path / f"train.{lang}").write_text(lines, encoding="utf-8")
        (tmp_path / f"dev.{lang}").write_text(text.format(7) + "\n", encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    command = [sys.executable, "-c", CORPUS_SCRIPT, str(tmp_path / "train"), str(tmp_path / "dev"), str(cache)]
    if kind == "read-only" and os.geteuid() != 0:
        cache.chmod(0o555)
    else:  # root writes through chmod: a mount namespace of its own, with a read-only bind mount or a tiny tmpfs
        if shutil.which("unshare") is None or os.geteuid() != 0:
            pytest.skip("needs root and unshare for a tiny tmpfs of its own")
        mount = (f"mount --bind {cache} {cache} && mount -o remount,bind,ro {cache}" if kind == "read-only" else
                 f"mount -t tmpfs -o size=64k tmpfs {cache}")
        command = ["unshare", "-m", "sh", "-c", f"{mount} && exec {shlex.join(command)}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode != 0 and "mount" in done.stderr and "Traceback" not in done.stderr:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    reason = "Read-only file system" if kind == "read-only" and os.geteuid() == 0 else \
        "Permission denied" if kind == "read-only" else \
        r"(No space left on device( for the about [\d,]+ bytes it needs)?|\d+ requested and \d+ written); [\d,]+ " \
        r"bytes free there"
    assert len(result["warnings"]) == 1, result
    assert re.fullmatch(rf"cannot write the cache entry {re.escape(str(cache))}/nmt-\w+ \({reason}\): "
                        r"training from the corpus without caching it \(set HOGWILD_CACHE to a writable folder to "
                        r"cache it\)", result["warnings"][0]), result
    assert result["cached"] is False and result["decoded"] == "The cat number 7 sleeps."


def test_an_entry_of_the_older_format_is_never_read_and_named_when_the_data_are_prepared_again(tmp_path):
    """Formats 1 (int64 arrays, no __version__ in meta.json) and 2 (no checksums) had other keys, so a load misses
    them; a meta.json naming another format at a current key is a damaged entry; a build that follows says once what
    the old entries take."""
    cache = ArrayCache(tmp_path)
    old = tmp_path / "nmt-0123456789abcdef01234567"
    old.mkdir()
    np.save(old / "train.src.npy", np.arange(2**18))  # 2 MiB of int64
    (old / "meta.json").write_text(json.dumps({"info": {}, "__arrays__": ["train.src"]}), encoding="utf-8")
    second = tmp_path / "nmt-89abcdef0123456789abcdef"
    second.mkdir()
    np.save(second / "train.src.npy", np.arange(2**17, dtype=np.uint16))  # 0.25 MiB: 2.25 in all
    (second / "meta.json").write_text(json.dumps({"info": {}, "__arrays__": ["train.src"], "__version__": 2}))
    with pytest.warns(CacheWarning) as caught:
        folder, stored = cache.build("nmt-new", lambda tmp: np.save(tmp / "a.npy", np.arange(3)) or {"x": 1})
    assert stored and [str(w.message) for w in caught] == [
        f"2 cache entries under {tmp_path} are of an older format (2 MiB), which this version never reads: delete "
        f"them to free the space ({old.name}, {second.name})"]
    crc32 = zlib.crc32((folder / "a.npy").read_bytes())
    assert read_entry(folder)[1] == {"x": 1, "__arrays__": ["a"], "__crc32__": {"a": crc32}, "__version__": 3}
    assert cache.load("nmt-new")[1]["x"] == 1 and (old / "meta.json").exists()  # left for the user to delete
    for entry, version in ((old, 1), (second, 2)):
        with pytest.warns(CacheWarning) as caught:
            assert cache.load(entry.name) is None  # an old entry at a current key (a copy by hand): not misread
        assert [str(w.message) for w in caught] == [
            f"damaged cache entry {entry / 'meta.json'} (ValueError: cache format {version}, not 3): rebuilding it"]
