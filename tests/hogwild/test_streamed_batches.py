"""hogwild.train on a stream of batches (an IterableDataset, a generator: feed/stream.py's StreamFeed): the parent
reads it as the workers' queues have room (an endless one trains in bounded memory), an epoch is one pass, one worker
trains exactly what the same batches as a list train, a resume continues after the batches already taken, a stream
that raises fails the run naming it, and what needs every batch up front is refused."""
import json
import os
import pathlib
import re
import resource
import subprocess
import sys

import pytest
import torch

import hogwild
from tests.hogwild import engine_helpers as H

SCRIPT = pathlib.Path(__file__).parent / "engine_scripts" / "train_on_an_endless_stream.py"
MEMORY_CAP = 3 << 30  # address space of each process; a parent that lists the endless stream fills it in seconds


class Batches(torch.utils.data.IterableDataset):
    """The regression batches a pass, in order, from `start`; `fail_at`: the pass raises there."""

    def __init__(self, n, start=0, fail_at=None):
        self.batches, self.start, self.fail_at = H.regression_batches(n=n), start, fail_at

    def __iter__(self):
        for i, batch in enumerate(self.batches[self.start:], self.start):
            if i == self.fail_at:
                raise OSError(f"the shard of batch {i} is gone")
            yield batch


def config(run_dir=None, **kwargs):
    return hogwild.Config(**{"workers": 1, "lr": 0.05, "progress": False, "tensorboard": False,
                             "checkpoint_dir": None if run_dir is None else str(run_dir), **kwargs})


def trained(batches, **kwargs):
    model = H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(**kwargs))
    return result, [p.detach().clone() for p in model.parameters()]


def test_one_worker_on_a_stream_equals_the_same_batches_as_a_list_an_epoch_a_pass():
    streamed, by_stream = trained(Batches(10), epochs=3)
    listed, by_list = trained(H.regression_batches(n=10), epochs=3, shuffle=False)
    assert (streamed.updates, streamed.stop_reason) == (listed.updates, listed.stop_reason) == (30, "epochs")
    assert all(torch.equal(a, b) for a, b in zip(by_stream, by_list))  # the same batches, in the same order


def test_a_resumed_stream_continues_after_the_batches_already_taken(tmp_path):
    """15 updates, last.pt, then --resume to 40: exactly the uninterrupted run of 40 (the resumed pass reads its first
    15 batches again and deals none of them)."""
    first, _ = trained(Batches(40), epochs=1, max_steps=15, run_dir=tmp_path)
    assert first.updates == 15
    model = H.regression_model()
    result = hogwild.train(model, H.mse_loss, Batches(40), config(tmp_path, epochs=1, resume=True))
    whole, by_whole = trained(Batches(40), epochs=1)
    assert result.updates == whole.updates == 40
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), by_whole))
    with pytest.raises(hogwild.CheckpointMismatch, match=r"it was trained on a stream of batches \(an iterable that "
                                                         r"cannot be indexed\), now there are 40 \(same"):
        hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=40), config(tmp_path, resume=True))


@pytest.mark.slow
def test_an_endless_generator_trains_in_bounded_memory():
    """hogwild.train read any iterable whole (feed.as_sequence's list(batches)): an endless one died with
    std::bad_alloc at 3.5 GB. Here 750 MiB are streamed under a 3 GiB cap, the parent's peak under 0.6 GiB."""
    import tempfile
    with tempfile.TemporaryDirectory() as run_dir:
        done = subprocess.run([sys.executable, str(SCRIPT), run_dir], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"},
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP)))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert (result["stop_reason"], result["updates"]) == ("max_steps", 1500)
    assert result["loss"] < 1e-3 and result["peak_kib"] < 600 * 1024


def test_a_stream_that_raises_stops_the_run_naming_it_after_the_checkpoint(tmp_path):
    """The parent reads the stream: one worker (config's) is enough for its failure to stop the run."""
    with pytest.raises(hogwild.WorkerFailed) as failed:
        hogwild.train(H.regression_model(), H.mse_loss, Batches(20, fail_at=12), config(tmp_path, epochs=1))
    message = str(failed.value)
    assert message.startswith("training stopped: reading the batches failed (their iterator raised):\nTraceback")
    assert "OSError: the shard of batch 12 is gone" in message and failed.value.worker == -1
    assert torch.load(tmp_path / "last.pt", weights_only=False)["global_step"] <= 12


@pytest.mark.parametrize("setting, why", [
    ({"mode": "sync", "workers": 2}, "Config.mode='sync' indexes the batches in each worker"),
    ({"data_assignment": "partition", "workers": 2}, "Config.data_assignment='partition' indexes the batches"),
    ({"graphs": "on", "devices": ["cpu-replica"]}, "Config.graphs='on' captures every batch shape at start-up"),
    ({"compile": "default"}, "Config.compile compiles every batch shape at start-up")])
def test_what_needs_every_batch_up_front_is_refused_for_a_stream(tmp_path, setting, why):
    with pytest.raises(ValueError, match=rf"^batches is a stream \(an iterable that cannot be indexed: .*\): "
                                         rf"{re.escape(why)}"):
        hogwild.train(H.regression_model(), H.mse_loss, Batches(4), config(tmp_path / "run", **setting))
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_sparse_tables_on_a_device_worker_are_refused_for_a_stream():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 2, sparse=True))
    with pytest.raises(ValueError, match=r"a device worker's sparse embedding tables are sized by the largest "
                                         r"batch's ids, which a stream does not know ahead"):
        hogwild.train(model, H.mse_loss, Batches(4), config(devices=["cpu-replica"]))


def test_the_library_md_example_trains_a_pass_per_epoch(tmp_path, monkeypatch):
    """docs/library.md's stream of shards, run as written: 2 shards of 5 batches, 2 epochs, 2 workers."""
    import glob

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "library.md").read_text(encoding="utf-8")
    example = next(block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if "class Shards" in block)
    (tmp_path / "shards").mkdir()
    batches = H.regression_batches(n=10)
    for shard in range(2):
        torch.save(batches[5 * shard:5 * shard + 5], tmp_path / "shards" / f"{shard}.pt")
    monkeypatch.chdir(tmp_path)
    namespace = {"torch": torch, "glob": glob, "hogwild": hogwild, "model": H.regression_model(),
                 "loss_fn": H.mse_loss}
    exec(example, namespace)  # noqa: S102 - the documented example
    assert (namespace["result"].updates, namespace["result"].stop_reason) == (20, "epochs")
