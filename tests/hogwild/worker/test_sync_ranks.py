"""Sync-mode ranks: one that dies mid-run ends the run within seconds naming it (not a peer's collective error, not
after the process group's timeout), with last.pt; NCCL ranks on one GPU each (CUDA tests, skipped without two)."""
import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch

import hogwild
from hogwild.worker import sync
from tests.hogwild import engine_helpers as H


@pytest.mark.parametrize("victim", [0, 1])  # rank 0 applies the update; rank 1 only contributes
def test_a_killed_sync_rank_ends_the_run_within_seconds_naming_it(tmp_path, victim):
    killed = {}

    def kill_rank():
        def target():
            return [p for p in multiprocessing.active_children() if p.name == f"hogwild-sync-{victim}"]
        if H.wait_for(lambda: target() and (tmp_path / "metrics.jsonl").exists()
                    and '"updates": 3' in (tmp_path / "metrics.jsonl").read_text()):
            killed["time"] = time.monotonic()
            os.kill(target()[0].pid, signal.SIGKILL)

    threading.Thread(target=kill_rank, daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed, match=rf"worker {victim} \(cpu, pid \d+\) was killed by signal SIGKILL") \
            as caught:
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
            workers=2, mode="sync", lr=0.05, epochs=50, log_every=1, checkpoint_dir=str(tmp_path), progress=False,
            tensorboard=False))
    assert time.monotonic() - killed["time"] < 5.0
    assert caught.value.worker == victim  # the dead rank, not its peer whose collective failed
    assert (tmp_path / "last.pt").exists()
    assert multiprocessing.active_children() == []


def test_a_failed_collective_followed_by_the_stop_is_a_lost_peer_else_the_ranks_own_error(monkeypatch):
    monkeypatch.setattr(sync, "PEER_GRACE", 0.2)
    with pytest.raises(sync.PeerLost, match="Connection closed by peer"):
        with sync.collective(lambda: True):
            raise RuntimeError("Connection closed by peer")
    with pytest.raises(RuntimeError, match="Connection closed by peer") as error:
        with sync.collective(lambda: False):  # no stop follows: this rank's own failure, reported as such
            raise RuntimeError("Connection closed by peer")
    assert error.type is RuntimeError
    with pytest.raises(ValueError):  # only collective (runtime) errors are examined
        with sync.collective(lambda: True):
            raise ValueError("not a collective")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices for NCCL (no such machine here)")
def test_nccl_ranks_on_two_gpus_equal_the_gloo_cpu_ranks():
    batches = H.regression_batches(n=9)
    results = {}
    for devices in (["cpu", "cpu"], ["cuda:0", "cuda:1"]):
        model = H.regression_model(dropout=0.0)
        result = hogwild.train(model, H.mse_loss, batches, hogwild.Config(
            devices=devices, mode="sync", lr=0.05, optimizer="msgd", epochs=2, seed=2, progress=False,
            tensorboard=False))
        assert sync.process_group_backend(devices) == ("nccl" if devices[0] != "cpu" else "gloo")
        results[devices[0]] = (result.updates, [p.detach().clone() for p in model.parameters()])
    assert results["cpu"][0] == results["cuda:0"][0] == 10
    for cpu, gpu in zip(results["cpu"][1], results["cuda:0"][1]):
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices for NCCL (no such machine here)")
def test_a_killed_nccl_rank_ends_the_run_within_the_join_timeout(tmp_path):
    killed = {}

    def kill_rank():
        def target():
            return [p for p in multiprocessing.active_children() if p.name == "hogwild-sync-1"]
        if H.wait_for(lambda: target() and (tmp_path / "metrics.jsonl").exists()
                    and '"updates": 3' in (tmp_path / "metrics.jsonl").read_text()):
            killed["time"] = time.monotonic()
            os.kill(target()[0].pid, signal.SIGKILL)

    threading.Thread(target=kill_rank, daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed, match=r"worker 1 \(cuda:1, pid \d+\) was killed by signal SIGKILL"):
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
            devices=["cuda:0", "cuda:1"], mode="sync", lr=0.05, epochs=50, log_every=1, join_timeout=3.0,
            checkpoint_dir=str(tmp_path), progress=False, tensorboard=False))
    assert time.monotonic() - killed["time"] < 3.0 + 5.0  # NCCL blocks: the parent kills the peer after join_timeout
    assert (tmp_path / "last.pt").exists()
