"""NMT task: Moses and subword pipelines on fixtures, dev references for BLEU, the cache, the synthetic task."""
import json
import pathlib
import re
import warnings

import numpy as np
import pytest
import torch

from hogwild.data.cache import ArrayCache, CacheWarning
from hogwild.data.errors import CorpusError
from hogwild.data.nmt_dataset import NmtDataConfig, held_out_size, load_nmt_dataset, synthetic_nmt_dataset
from hogwild.data.vocab import EOS

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "data"


def write_corpus(folder, n=60):
    fr = [f"Le chat numéro {i} dort, n'est-ce pas ?" for i in range(n)]
    en = [f"The cat number {i} sleeps, doesn't it?" for i in range(n)]
    for lang, lines in (("fr", fr), ("en", en)):
        (folder / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / f"dev.{lang}").write_text("\n".join(lines[:5]) + "\n", encoding="utf-8")
    return fr, en


def test_moses_task_with_dev_and_cache(tmp_path):
    fr, en = write_corpus(tmp_path)
    cache = ArrayCache(tmp_path / "cache")
    config = NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), batch_size=8, processes=1)
    task = load_nmt_dataset(config, cache)
    assert task.info["cached"] is False and task.info["train"]["kept"] == 60 and task.info["dev_pairs"] == 5
    assert task.dev_references == en[:5] and task.dev_sources == fr[:5]
    dev_batch = task.dev.batch(task.dev.plan()[0])
    assert [task.decode(row.tolist()) for row in dev_batch["tgt"]] == en[:5]  # detokenized == raw reference
    assert task.src_vocab.decode(dev_batch["src"][0].tolist()) == ["Le", "chat", "numéro", "0", "dort", ",", "n'",
                                                                   "est-ce", "pas", "?"]
    assert dev_batch["src"][0, 10].item() == EOS
    again = load_nmt_dataset(config, cache)
    assert again.info["cached"] is True and again.dev_references == en[:5] and again.src_vocab == task.src_vocab
    a, b = task.train.batches()[-1], again.train.batches()[-1]
    assert a.keys() == b.keys() and a["tokens"] == b["tokens"]
    assert all(torch.equal(a[k], b[k]) for k in a if k != "tokens")
    (tmp_path / "run").mkdir()
    again.save(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["data.json", "text.json", "vocab.src.json",
                                                                   "vocab.tgt.json"]


def test_length_filter_counts_moses_tokens(tmp_path):
    write_corpus(tmp_path)  # every line is 10 Moses tokens on each side
    with (tmp_path / "train.fr").open("a", encoding="utf-8") as handle:
        handle.write("un " * 30 + "\n\n")
    with (tmp_path / "train.en").open("a", encoding="utf-8") as handle:
        handle.write("one\nempty partner\n")
    task = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), max_len=11, dev_size=2, cache=False,
                                       processes=1))
    assert task.info["train"] == {"total": 62, "kept": 58, "dropped_empty": 1, "dropped_long": 1,
                                   "held_out": 2}
    assert task.info["dev"]["kept"] == 2
    with pytest.raises(CorpusError, match="no pairs left after filtering.*'dropped_long': 61"):
        load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), max_len=9, cache=False, processes=1))


def test_all_pairs_too_long_is_an_error(tmp_path):
    write_corpus(tmp_path)
    with pytest.raises(CorpusError, match="no pairs left after filtering"):
        load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), max_len=5, cache=False, processes=1))


def test_holdout_lowercase_and_top_k(tmp_path):
    write_corpus(tmp_path)
    task = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), vocab_size=5, lowercase=True, dev_size=6,
                                       cache=False, processes=1, seed=2))
    assert (task.info["train_pairs"], task.info["dev_pairs"]) == (54, 6)
    assert len(task.src_vocab) == 4 + 5 and all(t == t.lower() for t in task.src_vocab.itos[4:])
    assert all(ref == ref.lower() for ref in task.dev_references)
    assert set(task.dev_references) <= {f"the cat number {i} sleeps, doesn't it?" for i in range(60)}


def test_subword_task_round_trips_and_saves_models(tmp_path):
    fr, en = write_corpus(tmp_path)
    cache = ArrayCache(tmp_path / "cache")
    config = NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), subwords="bpe",
                           subword_vocab_size=60, processes=1)
    for attempt in range(2):
        task = load_nmt_dataset(config, cache)
        assert task.info["cached"] is bool(attempt)
        batch = task.dev.batch(np.arange(5))
        assert [task.decode(row.tolist()) for row in batch["tgt"]] == en[:5]
        assert all(pathlib.Path(p).is_file() for p in task.subword_models.values())
    (tmp_path / "run").mkdir()
    task.save(tmp_path / "run")
    assert (tmp_path / "run" / "spm.src.model").is_file() and (tmp_path / "run" / "spm.tgt.model").is_file()


def test_eval_set_and_source_encoding_follow_the_task(tmp_path):
    fr, en = write_corpus(tmp_path)
    (tmp_path / "test.fr").write_text("Le chat numéro 7 dort ?\n\nLe chien ?\n", encoding="utf-8")
    (tmp_path / "test.en").write_text("The Cat number 7 sleeps.\nx\nThe dog?\n", encoding="utf-8")
    task = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), lowercase=True,
                                       cache=False, processes=1))
    test = task.eval_set(tmp_path / "test", batch_size=4)
    assert test.references == ["the cat number 7 sleeps.", "the dog?"]  # empty pair dropped, lowercased like training
    assert test.sources == ["Le chat numéro 7 dort ?", "Le chien ?"]
    assert test.counts == {"total": 3, "kept": 2, "dropped_empty": 1, "dropped_long": 0, "held_out": 0}
    batch = next(iter(test.batcher))
    assert task.src_vocab.decode(batch["src"][0].tolist()) == ["le", "chat", "numéro", "7", "dort", "?"]
    assert task.src_vocab.decode(batch["src"][1].tolist()) == ["le", "<unk>", "?"]
    encoded = task.encode_source(["Le chat numéro 7 dort ?", "Le chien ?"])
    assert torch.equal(encoded["src"], batch["src"]) and torch.equal(encoded["src_mask"], batch["src_mask"])
    assert task.tokenize(["The Cat!"], "tgt") == [["the", "cat", "!"]]
    sub = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), subwords="unigram",
                                      subword_vocab_size=60, cache=False, processes=1))
    assert sub.eval_set(tmp_path / "test").references[1] == "The dog?"
    assert "".join(sub.tokenize(["Le chat"])[0]).replace("▁", " ").strip() == "Le chat"
    synthetic = synthetic_nmt_dataset(num_train=10, num_dev=2)  # whitespace words, files prefix.src / prefix.tgt
    (tmp_path / "words.src").write_text(" ".join(synthetic.dev_sources[0].split()[:2]) + " zzz\n", encoding="utf-8")
    (tmp_path / "words.tgt").write_text(synthetic.dev_references[0] + "\n", encoding="utf-8")
    words = synthetic.eval_set(tmp_path / "words")
    assert words.references == synthetic.dev_references[:1]
    assert synthetic.src_vocab.decode(next(iter(words.batcher))["src"][0].tolist())[-1] == "<unk>"


def test_bad_config_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="subwords must be None or one of"):
        NmtDataConfig(train="x", subwords="wordpiece")
    with pytest.raises(ValueError, match="src_lang and tgt_lang must differ"):
        NmtDataConfig(train="x", src_lang="en", tgt_lang="en")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        NmtDataConfig(train="x", batch_size=0)
    with pytest.raises(CorpusError, match=r"train\.fr: file not found"):
        load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), cache=False))


def test_synthetic_task():
    task = synthetic_nmt_dataset(num_train=300, num_dev=20, batch_size=16)
    assert (task.info["train_pairs"], task.info["dev_pairs"], len(task.train)) == (300, 20, 19)
    batch = task.dev.batch(np.arange(20))
    assert [task.decode(row.tolist()) for row in batch["tgt"]] == task.dev_references
    assert task.src_vocab.decode(batch["src"][0].tolist()) == task.dev_sources[0].split()


@pytest.mark.corpora
def test_europarl_dev_only_task(corpus, tmp_path):
    folder = corpus("europarl-fr-en")
    task = load_nmt_dataset(NmtDataConfig(train=str(folder / "dev"), dev=str(folder / "test"), dev_limit=100,
                                       processes=1), ArrayCache(tmp_path))
    assert task.info["train"]["total"] == 3_000 and task.info["dev_pairs"] == 100
    assert task.info["train"]["kept"] + task.info["train"]["dropped_long"] == 3_000
    assert task.dev_references[0] == "Resumption of the session"


def test_without_dev_a_seeded_ten_percent_is_held_out_at_most_dev_size(tmp_path):
    assert [held_out_size(n, 0.1, 3000) for n in (10, 14, 15, 3000, 30_000, 40_000)] == [1, 1, 2, 300, 3000, 3000]
    write_corpus(tmp_path, n=3000)  # the corpus that used to train on one pair (min(3000, n - 1) held out)
    task = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), cache=False, processes=1, seed=3))
    assert (task.info["train_pairs"], task.info["dev_pairs"]) == (2700, 300)
    assert task.info["train"]["held_out"] == 300
    again = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), cache=False, processes=1, seed=3))
    assert again.dev_references == task.dev_references  # seeded


def test_a_corpus_too_small_to_split_is_refused_naming_dev(tmp_path):
    write_corpus(tmp_path, n=9)
    with pytest.raises(CorpusError, match=r"train\.fr: 9 pairs: too few to hold out a 10% split \(at least 10 are "
                                          r"needed\); give a held-out corpus with --dev, or a larger --train") as error:
        load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), cache=False, processes=1))
    assert error.value.option == "dev"
    task = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), cache=False,
                                          processes=1))
    assert (task.info["train_pairs"], task.info["dev_pairs"]) == (9, 5)  # with --dev nothing is held out


def _damage(folder, how):
    """The damages of issue 51 (shapes intact: a load used to train on them silently, or fail in a worker) and
    earlier ones. A meta.json whose vocabulary lost its last words leaves every array's checksum as written."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    if how == "short array":
        np.save(folder / "train.src.npy", np.load(folder / "train.src.npy")[:-3])
    elif how in ("zeros", "ids 65535", "offsets reversed"):
        array = np.load(folder / ("train.src_offsets.npy" if how == "offsets reversed" else "train.src.npy"),
                        mmap_mode="r+")
        if how == "offsets reversed":
            array[5:50] = array[5:50][::-1].copy()
        else:
            array[:] = 0 if how == "zeros" else 65535
        array.flush()
    elif how == "a smaller vocabulary":
        meta["src_vocab"]["tokens"] = meta["src_vocab"]["tokens"][:-2]
    else:
        del meta["src_vocab"]
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.parametrize("how, error", [
    ("short array", r"/train\.src_offsets\.npy \(offsets that do not run from 0 up to 597 \(the length of "
                    r"train\.src\.npy\) without decreasing\)"),
    ("offsets reversed", r"/train\.src_offsets\.npy \(offsets that do not run from 0 up to 600 \(the length of "
                         r"train\.src\.npy\) without decreasing\)"),
    ("ids 65535", r"/train\.src\.npy \(id 65535 where the vocabulary has 73 ids\)"),
    ("a smaller vocabulary", r"/train\.src\.npy \(id 72 where the vocabulary has 71 ids\)"),
    ("zeros", r"/train\.src\.npy \(its CRC-32 is 0x[0-9a-f]{8}, not the 0x[0-9a-f]{8} written when it was prepared: "
              r"the file changed since\)"),
    ("meta.json without a key", r" \(KeyError: 'src_vocab'\)")])
def test_a_damaged_cache_entry_is_named_once_and_rebuilt(tmp_path, how, error):
    write_corpus(tmp_path)
    cache = ArrayCache(tmp_path / "cache")
    config = NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"), processes=1)
    fresh = load_nmt_dataset(config, cache)
    arrays = {name: np.array(array) for name, array in fresh.train.data.arrays().items()}  # not the mapped files
    (folder,) = [path for path in (tmp_path / "cache").iterdir()]
    _damage(folder, how)
    with pytest.warns(CacheWarning) as caught:
        rebuilt = load_nmt_dataset(config, cache)
    assert len(caught) == 1
    assert re.fullmatch(rf"damaged cache entry {re.escape(str(folder))}{error}: rebuilding it", str(caught[0].message))
    assert rebuilt.info["cached"] is False and rebuilt.dev_references == fresh.dev_references
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replaced: the next load is a clean hit
        hit = load_nmt_dataset(config, cache)
    assert hit.info["cached"] is True
    assert all(np.array_equal(a, arrays[name]) for name, a in hit.train.data.arrays().items())
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [folder.name]  # nothing else left


@pytest.fixture(scope="module")
def pooled_corpus(tmp_path_factory):
    """train.fr / train.en of 21,000 pairs, over POOL_PAIRS (5 chunks): encoded in a pool of 2 processes, which is
    still at work when the first chunk is merged and has the fewest chunks left to finish after a signal. Written
    once for the tests that stop its preparation (each prepares it into a cache of its own)."""
    from hogwild.data.streamed_nmt import CHUNK_PAIRS, POOL_PAIRS
    from tests.tasks.helpers import write_parallel
    assert POOL_PAIRS // CHUNK_PAIRS == 4  # 21,000 pairs: one chunk more than a corpus encoded in this process
    return write_parallel(tmp_path_factory.mktemp("pooled") / "train", 21_000, 0)


@pytest.mark.slow
def test_a_preparation_killed_half_way_leaves_no_traceback_and_the_next_load_removes_its_folder(tmp_path,
                                                                                                 pooled_corpus):
    """kill -9 during a cold preparation over the pool left a hidden `.nmt-...` folder in the cache for good, and the
    pool's processes printed BrokenPipeError tracebacks as they sent their results to a dead parent. They die with
    it now, and the folder (its writer's lock released by the kernel) goes at the next load."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.tasks.helpers import REPO

    cache = tmp_path / "cache"
    code = (f"from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset; from hogwild.data.cache import "
            f"ArrayCache; load_nmt_dataset(NmtDataConfig(train={str(pooled_corpus)!r}, processes=2), "
            f"ArrayCache({str(cache)!r}))")
    preparing = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not any(path.stat().st_size for path in cache.glob(".nmt-*/train.src.ids")):  # chunks merged
            assert preparing.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        preparing.send_signal(signal.SIGKILL)
        _, errors = preparing.communicate(timeout=60)  # the pool's processes hold stderr until they die too
    finally:
        if preparing.poll() is None:
            preparing.kill()
            preparing.wait()
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
    (left,) = cache.iterdir()
    assert left.name.startswith(".nmt-") and (left / ".owner").exists()
    assert ArrayCache(cache).load("nmt-another") is None
    assert list(cache.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_to_the_whole_process_group_during_a_pooled_preparation_ends_run_py_cleanly(tmp_path, pooled_corpus,
                                                                                           signum):
    """Ctrl-C reaches every process of the terminal's group: each process of the tokenization pool printed a
    KeyboardInterrupt traceback. A SIGTERM to the group (`kill -- -PGID`) killed them, one of them while it held the
    pool's task queue lock, and run.py then waited on that lock for good when it terminated the pool. The pool
    leaves these signals to run.py, which stops ("interrupted", exit 130) and closes it; the next load removes the
    half-built entry."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.tasks.helpers import REPO

    cache = tmp_path / "cache"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOGWILD_CACHE": str(cache)}
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), "--task", "nmt", "--train",
                                str(pooled_corpus), "--src-lang", "fr", "--tgt-lang", "en", "--steps", "1",
                                "--out", str(tmp_path / "run")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(path.stat().st_size for path in cache.glob(".nmt-*/train.src.ids")):  # the pool is at work
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        os.killpg(process.pid, getattr(signal, signum))
        _, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert (process.returncode, errors.splitlines()[-1]) == (130, "run.py: interrupted"), errors
    assert "Traceback" not in errors and not (tmp_path / "run").exists()
    assert ArrayCache(cache).load("nmt-another") is None and list(cache.iterdir()) == []
