"""hogwild.share.checkpoint: atomic writes, exact resume (same data order, same final parameters), shape refusal; files
read without unpickling anything but tensors and plain values; every tensor written on the CPU."""
import io
import os
import shutil

import pytest
import torch

import hogwild
from hogwild.share import checkpoint as C
from hogwild.worker.replica import move_batch
from tests.hogwild import engine_helpers as H


def config(run_dir, **kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 5, "optimizer": "adam", "lr": 0.01,
                             "checkpoint_dir": str(run_dir), **kwargs})


def test_save_is_atomic_a_failed_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = str(tmp_path / "last.pt")
    C.save_checkpoint(path, {"value": torch.tensor([1.0])})

    def broken_save(obj, file):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(C.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        C.save_checkpoint(path, {"value": torch.tensor([2.0])})
    monkeypatch.undo()
    assert torch.load(path)["value"].item() == 1.0
    assert os.listdir(tmp_path) == ["last.pt"]  # no temporary file left behind


@pytest.fixture(scope="module")
def nine_updates(tmp_path_factory):
    """A run folder of 9 updates on H.regression_batches(n=12) and its result: one engine run for the two tests that
    resume it (each resumes a copy)."""
    folder = tmp_path_factory.mktemp("nine-updates")
    result = hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=12), config(folder, max_steps=9))
    return folder, result


def test_resume_continues_at_the_exact_step_with_the_same_data_order(tmp_path, nine_updates):
    batches = H.regression_batches(n=12)
    uninterrupted = H.regression_model()
    full = hogwild.train(uninterrupted, H.mse_loss, batches, config(tmp_path / "a", max_steps=20))
    assert full.updates == 20

    folder, first = nine_updates
    assert first.updates == 9 and first.stop_reason == "max_steps"
    shutil.copytree(folder, tmp_path / "b")
    saved = torch.load(tmp_path / "b" / "last.pt", weights_only=False)
    assert saved["global_step"] == 9 and saved["data_position"]["seq"] == 9
    fresh = H.regression_model()  # a new process would rebuild the model from scratch
    second = hogwild.train(fresh, H.mse_loss, batches, config(tmp_path / "b", max_steps=20, resume=True))
    assert second.updates == 20
    for got, expected in zip(fresh.parameters(), uninterrupted.parameters()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_resume_refuses_a_model_of_another_shape(tmp_path, nine_updates):
    batches = H.regression_batches(n=12)
    shutil.copytree(nine_updates[0], tmp_path, dirs_exist_ok=True)
    wider = torch.nn.Sequential(torch.nn.Linear(4, 9), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(9, 1))
    with pytest.raises(hogwild.CheckpointMismatch, match=r"'0.weight' has shape \(8, 4\) in the checkpoint but "
                                                         r"\(9, 4\) in this model"):
        hogwild.train(wider, H.mse_loss, batches, config(tmp_path, max_steps=4, resume=True))
    with pytest.raises(hogwild.CheckpointMismatch, match="this model has no tensor '3.weight'"):
        C.load_checkpoint(str(tmp_path / "last.pt"), torch.nn.Sequential(torch.nn.Linear(4, 8)))


def test_resume_with_more_workers_uses_each_remaining_batch_exactly_once(tmp_path):
    first = H.Counter(30)  # its shared 'seen' buffer is checkpointed with the parameters
    hogwild.train(first, H.counting_loss, H.id_batches(30), config(tmp_path, optimizer="sgd", max_steps=10))
    assert int(first.seen.sum()) == 10
    second = H.Counter(30)
    result = hogwild.train(second, H.counting_loss, H.id_batches(30),
                           config(tmp_path, optimizer="sgd", workers=2, epochs=1, resume=True))
    assert second.seen.tolist() == [1] * 30  # the 10 trained before and the 20 after, each once
    assert result.updates == 30 and result.stop_reason == "epochs"


def test_partition_mode_resumes_every_worker_at_its_own_shard_position(tmp_path):
    first = H.Counter(30)
    hogwild.train(first, H.counting_loss, H.id_batches(30),
                  config(tmp_path, optimizer="sgd", workers=2, data_assignment="partition", max_steps=9))
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    positions = saved["data_position"]["workers"]
    assert sum(position for _, position in positions) == int(first.seen.sum()) >= 9
    second = H.Counter(30)
    hogwild.train(second, H.counting_loss, H.id_batches(30),
                  config(tmp_path, optimizer="sgd", workers=2, data_assignment="partition", epochs=1, resume=True))
    assert second.seen.tolist() == [1] * 30


class CreatesAFile:
    """A crafted pickle: unpickling it calls open(path, 'w'), i.e. runs code of the file's choosing."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path):
    marker = tmp_path / "created-by-the-pickle"
    path = tmp_path / "last.pt"
    torch.save({"format": C.FORMAT, "model": {"w": torch.zeros(1)}, "payload": CreatesAFile(marker)}, path)
    # The global is named as pickle records it: io.open on Python 3.11, _io.open on 3.12 (the GPU image's python)
    with pytest.raises(C.CheckpointError, match=rf"^{path}: not a hogwild checkpoint \(it needs _?io\.open "
                                                r"unpickled; refused: loading it could run code\)"):
        C.read_checkpoint(str(path))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what the engine once did: the payload runs
    assert marker.exists()
    torch.save({"format": C.FORMAT, "model": {}, "payload": RunsACommand()}, path)  # a blocked module's function
    with pytest.raises(C.CheckpointError) as refused:
        C.read_checkpoint(str(path))
    assert str(refused.value) == f"{path}: not a hogwild checkpoint (it needs {os.system.__module__}.system " \
                                 f"unpickled; refused: loading it could run code)"  # not torch's weights_only advice


class RunsACommand:
    def __reduce__(self):
        return os.system, ("exit 3",)


def test_a_foreign_pt_file_is_named(tmp_path):
    path = tmp_path / "last.pt"
    torch.save(H.regression_model().state_dict(), path)  # a plain state_dict: readable, but not ours
    with pytest.raises(C.CheckpointError, match=rf"^{path}: not a hogwild checkpoint \(no 'format': 1 entry\)"):
        C.read_checkpoint(str(path))


def test_our_checkpoints_load_safely_with_the_rng_states_exact(tmp_path):
    import random

    import numpy as np
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    C.save_checkpoint(str(tmp_path / "c.pt"), {"model": {"w": torch.arange(3.0)}, "rng": C.rng_states()})
    expected = (random.random(), np.random.random(), torch.rand(1).item())
    state = C.read_checkpoint(str(tmp_path / "c.pt"))  # weights_only, with numpy's RNG array allowed
    assert state["model"]["w"].tolist() == [0.0, 1.0, 2.0]
    C.restore_rng_states(state["rng"])
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected


def test_every_tensor_written_is_a_cpu_tensor(tmp_path, monkeypatch):
    """A GPU snapshot (the evaluator's, with eval_device on a GPU) goes to best.pt as CPU tensors. Without a GPU
    here, fake tensors stand in for CUDA ones (they carry the device, not the data), and torch.save is replaced by
    a function that keeps what it was given."""
    fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")
    with fake_tensor.FakeTensorMode():
        on_gpu = torch.zeros(2, device="cuda:0")
    written = {}
    monkeypatch.setattr(C, "write_atomic", lambda path, write: write(io.BytesIO()))
    monkeypatch.setattr(C.torch, "save", lambda obj, file: written.update(obj))
    state = {"model": {"w": on_gpu}, "optimizer": {"state": [{"exp_avg": on_gpu}]}, "rng": (1, [on_gpu])}
    C.save_checkpoint(str(tmp_path / "best.pt"), state)
    devices = [written["model"]["w"].device.type, written["optimizer"]["state"][0]["exp_avg"].device.type,
               written["rng"][1][0].device.type]
    assert devices == ["cpu", "cpu", "cpu"] and written["format"] == C.FORMAT
    assert state["model"]["w"].device.type == "cuda"  # what it was given is left as it was


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_best_pt_of_a_gpu_evaluation_loads_without_map_location(tmp_path):
    def evaluate(model):  # the snapshot lives on cuda:0: its batches go there too
        batches = move_batch(H.regression_batches(n=2), next(model.parameters()).device)
        return {"loss": -H.dataset_loss(model, batches)}

    result = hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=8),
                           config(tmp_path, max_steps=4, eval_every=2, eval_device="cuda:0"), evaluate=evaluate)
    for path in (result.best_checkpoint, result.checkpoint):
        state = torch.load(path, weights_only=False)  # no map_location: tensors load where they were saved
        assert all(t.device.type == "cpu" for t in state["model"].values()), path


def test_a_fresh_run_in_a_directory_holding_a_run_is_warned_about(tmp_path, recwarn):
    C.prepare_run_dir(hogwild.Config(checkpoint_dir=str(tmp_path)))  # an empty directory: nothing to replace
    (tmp_path / C.LAST).write_bytes(b"a run's checkpoint")
    C.prepare_run_dir(hogwild.Config(checkpoint_dir=str(tmp_path), resume=True))  # continuing it: no warning
    assert not recwarn.list
    with pytest.warns(UserWarning, match=rf"{tmp_path} holds a run's last.pt: this fresh run replaces its last.pt"):
        C.prepare_run_dir(hogwild.Config(checkpoint_dir=str(tmp_path)))
