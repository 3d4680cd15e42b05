"""hogwild.checkpoint: atomic writes, exact resume (same data order, same final parameters), shape refusal."""
import os

import pytest
import torch

import hogwild
from hogwild import checkpoint as C
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


def test_resume_continues_at_the_exact_step_with_the_same_data_order(tmp_path):
    batches = H.regression_batches(n=12)
    uninterrupted = H.regression_model()
    full = hogwild.train(uninterrupted, H.mse_loss, batches, config(tmp_path / "a", max_steps=20))
    assert full.updates == 20

    resumed = H.regression_model()
    first = hogwild.train(resumed, H.mse_loss, batches, config(tmp_path / "b", max_steps=9))
    assert first.updates == 9 and first.stop_reason == "max_steps"
    saved = torch.load(tmp_path / "b" / "last.pt", weights_only=False)
    assert saved["global_step"] == 9 and saved["data_position"]["seq"] == 9
    fresh = H.regression_model()  # a new process would rebuild the model from scratch
    second = hogwild.train(fresh, H.mse_loss, batches, config(tmp_path / "b", max_steps=20, resume=True))
    assert second.updates == 20
    for got, expected in zip(fresh.parameters(), uninterrupted.parameters()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_resume_refuses_a_model_of_another_shape(tmp_path):
    batches = H.regression_batches(n=4)
    hogwild.train(H.regression_model(), H.mse_loss, batches, config(tmp_path, max_steps=2))
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
