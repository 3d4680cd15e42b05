"""tasks.resume_checks: the stop condition a checkpoint has reached, in every data mode (exact counts on small data
positions); the refusals themselves run through run.py in tests/tasks/test_misuse.py."""
import shutil
from types import SimpleNamespace

import pytest

from hogwild.data.subwords import SubwordModel
from hogwild.tasks.resume_checks import (ResumeError, check_hosts, check_same_files, epochs_done, nothing_to_train,
                                         stop_reached)


def _options(steps=None, epochs=None, data_assignment="queue"):
    return SimpleNamespace(steps=steps, epochs=epochs, data_assignment=data_assignment)


@pytest.mark.parametrize("seq, done", [(0, 0), (9, 0), (10, 1), (29, 2), (30, 3)])
def test_queue_and_sync_count_the_tickets_handed_out(seq, done):
    assert epochs_done({"n_batches": 10, "seq": seq, "workers": [(0, 0), (0, 0)]}, 10, partition=False) == done


def test_partition_counts_the_slowest_shard():
    # 10 batches, 3 workers: shards of 4, 3 and 3 batches (range(w, 10, 3))
    assert epochs_done({"seq": 0, "workers": [(1, 4), (1, 3), (1, 2)]}, 10, partition=True) == 1
    assert epochs_done({"seq": 0, "workers": [(1, 4), (1, 3), (1, 3)]}, 10, partition=True) == 2
    assert epochs_done({"seq": 0, "workers": [(1, 3), (1, 3), (1, 3)]}, 10, partition=True) == 1


def test_stop_reached_names_the_flag_that_stops_the_run():
    state = {"global_step": 200, "data_position": {"n_batches": 100, "seq": 200, "workers": []}}
    assert stop_reached(state, _options(steps=200), 100) == ("--steps", 200, 200)
    assert stop_reached(state, _options(steps=150), 100) == ("--steps", 150, 200)  # "larger than 200", not than 150
    assert stop_reached(state, _options(steps=201), 100) is None
    assert stop_reached(state, _options(epochs=2), 100) == ("--epochs", 2, 2)
    assert stop_reached(state, _options(epochs=1), 100) == ("--epochs", 1, 2)
    assert stop_reached(state, _options(epochs=3), 100) is None
    assert stop_reached(state, _options(), 100) is None  # only a --time-limit: each segment has its own


def test_nothing_to_train_asks_for_more_than_the_checkpoint_holds(tmp_path):
    message = str(nothing_to_train(tmp_path / "last.pt", ("--steps", 200, 300), 300))
    assert message == (f"--steps 200: {tmp_path / 'last.pt'} is already at update 300, where --steps 200 stops the "
                       f"run: nothing to train (the run is left as it was); give a larger --steps than 300 to "
                       f"continue it")


def test_a_damaged_sentencepiece_model_is_named_as_damaged_and_another_one_as_different(tmp_path):
    """A resumed run rebuilds its job files from its data and flags; the run's own sentencepiece model cut short is
    named as damaged (not blamed on --train), a readable other one as different; the run's files are not touched."""
    staged, run_dir = tmp_path / "staged", tmp_path / "run"
    run_dir.mkdir()
    lines = [f"le chat {i} mange la souris numero {i % 7}" for i in range(200)]
    built = SubwordModel.train(lines, staged / "spm.fr", vocab_size=40).path
    (staged / "vocab.json").write_text('{"words": ["a"]}', encoding="utf-8")
    shutil.copy(staged / "vocab.json", run_dir / "vocab.json")
    damaged = built.read_bytes()[: len(built.read_bytes()) // 2]
    (run_dir / built.name).write_bytes(damaged)
    with pytest.raises(ResumeError, match=r"run/spm\.fr\.model is damaged \(.+\); the run cannot continue") as error:
        check_same_files(staged, run_dir)
    assert "another --train" not in str(error.value)
    assert (run_dir / built.name).read_bytes() == damaged
    SubwordModel.train(lines[:100], tmp_path / "other", vocab_size=30).path.replace(run_dir / built.name)
    with pytest.raises(ResumeError, match=r"spm\.fr\.model differs from the one built .*another --train"):
        check_same_files(staged, run_dir)
    shutil.copy(built, run_dir / built.name)
    check_same_files(staged, run_dir)  # the same bytes: nothing to say


def _hosts(root, *files):
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    return root


def test_a_host_without_last_pt_is_named_not_counted_out(tmp_path):
    """An aborted 2-host job where host1 never wrote its last.pt: not "trained on 1 hosts, resume under mpiexec
    -n 1" (which then failed on the batch count), but the host that holds none."""
    run = _hosts(tmp_path, "host0/last.pt", "host0/metrics.jsonl", "host1/config.json", "host1/metrics.jsonl")
    for hosts in (1, 2):
        with pytest.raises(ResumeError) as refused:
            check_hosts(run, hosts, 0)
        assert str(refused.value).startswith(f"--resume: {run} was trained on 2 hosts, and host1 holds no last.pt "
                                             f"(the job ended before that host wrote one")


def test_every_host_with_its_last_pt_resumes_on_as_many_ranks(tmp_path):
    run = _hosts(tmp_path, *(f"host{i}/last.pt" for i in (0, 1, 10)), "hostname.txt")
    check_hosts(run, 3, 1)
    with pytest.raises(ResumeError, match=r"trained on 3 hosts \(host0, host1, host10 hold their last\.pt\), this "
                                          r"job has 2 training rank\(s\): resume it under mpiexec -n 4 as it ran"):
        check_hosts(run, 2, 1)
    check_hosts(_hosts(tmp_path / "fresh", "host0/config.json"), 2, 0)  # nothing to resume from: check_out's case
