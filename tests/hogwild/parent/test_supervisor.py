"""hogwild.parent.supervisor with real processes and real signals: failures are named, signals stop gracefully with a
checkpoint, a killed parent leaves no orphan workers, and /dev/shm is checked before spawning."""
import json
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import hogwild
from tests.hogwild import engine_helpers as H
from tests.worker_processes import worker_pids

SCRIPT = pathlib.Path(__file__).parents[1] / "engine_scripts" / "train_until_signalled.py"


def config(run_dir, **kwargs):
    return hogwild.Config(**{"workers": 2, "epochs": 1000, "lr": 0.01, "progress": False, "tensorboard": False,
                             "checkpoint_dir": str(run_dir), **kwargs})


def trained_updates(run_dir) -> int:
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return max((r["updates"] for r in records if r["kind"] == "train"), default=0)


def alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_worker_that_raises_is_named_with_its_traceback(tmp_path):
    batches = [(x, y, torch.tensor(-1 if i == 5 else i)) for i, (x, y) in enumerate(H.regression_batches(n=12))]
    with pytest.raises(hogwild.WorkerFailed) as caught:
        hogwild.train(H.regression_model(), H.failing_loss, batches, config(tmp_path))
    message = str(caught.value)
    assert "raised an exception" in message and f"worker {caught.value.worker} (cpu, pid " in message
    assert "ValueError: deliberate failure on the marked batch" in message
    assert "failing_loss" in message  # the worker's own traceback
    assert caught.value.checkpoint == str(tmp_path / "last.pt") and os.path.exists(caught.value.checkpoint)
    assert multiprocessing.active_children() == []  # the other worker was stopped


def test_a_worker_that_raises_while_the_run_stops_is_still_a_failure(tmp_path):
    """The time limit (0.5 s) stops the run while the only worker is inside a 2 s step that then raises: the parent
    has left its loop by then, and the worker's exit status must still make the run fail (it once ended cleanly,
    the failure unreported: a multi-host job then finished with exit status 0)."""
    with pytest.raises(hogwild.WorkerFailed) as caught:
        hogwild.train(H.regression_model(), H.fails_late_loss, H.regression_batches(n=4),
                      config(tmp_path, workers=1, time_limit=0.5))
    assert "ValueError: deliberate failure in the last step" in str(caught.value)
    assert caught.value.worker == 0 and os.path.exists(caught.value.checkpoint)


def test_a_worker_killed_by_a_signal_is_named(tmp_path):
    killed = {}

    def kill_worker_one():
        def target():
            return [p for p in multiprocessing.active_children() if p.name == "hogwild-worker-1"]
        if H.wait_for(lambda: target() and trained_updates(tmp_path) >= 2):
            killed["time"] = time.monotonic()
            os.kill(target()[0].pid, signal.SIGKILL)

    threading.Thread(target=kill_worker_one, daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed, match=r"worker 1 \(cpu, pid \d+\) was killed by signal SIGKILL"):
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), config(tmp_path, log_every=1))
    assert time.monotonic() - killed["time"] < 5.0  # detected, others stopped, checkpoint written: in seconds
    assert (tmp_path / "last.pt").exists()
    assert multiprocessing.active_children() == []


def test_sigint_to_the_parent_alone_stops_gracefully_with_a_checkpoint(tmp_path):
    """SIGINT to the parent alone (its workers never see it: one is enough); SIGTERM and SIGHUP reach the same handler
    in the process-group test below, each run by a real signal to the parent as well."""
    signum = signal.SIGINT
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path), "1"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert H.wait_for(lambda: trained_updates(tmp_path) >= 2), "training did not start"
        sent = time.monotonic()
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert time.monotonic() - sent < 10.0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["stop_reason"] == f"signal {signal.Signals(signum).name}"
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    assert saved["global_step"] == result["updates"] >= 2


def test_the_first_signal_after_training_ended_is_not_called_again_and_is_handed_on(tmp_path, capfd):
    """A SIGTERM while the run stops at max_steps (here: during its final evaluation) was called "SIGTERM again:
    already stopping" and lost: run.py then ran its whole final beam decoding and exited 0. It is the first signal:
    training keeps its own stop reason, the evaluation and last.pt go on, and TrainResult.late_signal names it."""
    def evaluate(model, final):
        if final:
            os.kill(os.getpid(), signal.SIGTERM)  # the engine's handler takes it, in this (main) thread
        return {"score": 1.0}

    result = hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=8),
                           config(tmp_path, workers=1, max_steps=6), evaluate)
    assert (result.stop_reason, result.late_signal, result.updates) == ("max_steps", "signal SIGTERM", 6)
    assert result.final_metrics == {"score": 1.0} and (tmp_path / "last.pt").exists()
    assert "again" not in capfd.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_whole_process_group_stops_gracefully(tmp_path, signum):
    """`timeout`, batch schedulers and service managers (SIGTERM) and a closed terminal (SIGHUP) signal every process
    of the group, the workers too: the workers ignore it and the parent stops them after their step and checkpoints
    (no worker counts as failed)."""
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert H.wait_for(lambda: trained_updates(tmp_path) >= 2), "training did not start"
        sent = time.monotonic()
        os.killpg(process.pid, signum)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert time.monotonic() - sent < 10.0
    assert "Traceback" not in err and "resource_tracker" not in err  # nothing else of the group died
    result = json.loads(out.strip().splitlines()[-1])
    assert result["stop_reason"] == f"signal {signal.Signals(signum).name}"
    assert torch.load(tmp_path / "last.pt", weights_only=False)["global_step"] == result["updates"] >= 2


def test_killing_the_parent_leaves_no_orphan_workers(tmp_path):
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        assert H.wait_for(lambda: trained_updates(tmp_path) >= 2), "training did not start"
        workers = worker_pids(process.pid)
        assert len(workers) == 2
        process.kill()  # SIGKILL: no handler, no cleanup in the parent
        process.wait(10)
        assert H.wait_for(lambda: not any(alive(pid) for pid in workers), timeout=10), "orphan workers remain"
    finally:
        process.kill()


def test_killing_the_parent_while_workers_start_leaves_none_behind(tmp_path):
    """Workers still loading (held 60 s before their prelude, as a slow torch import holds them) die with a parent
    killed by SIGKILL at once: they used to live on until their prelude's check, tens of seconds with many workers."""
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "HOLD_WORKER_START": "60"})
    try:
        assert H.wait_for(lambda: len(worker_pids(process.pid)) == 2, timeout=60), "the workers did not start"
        started = worker_pids(process.pid)
        time.sleep(1)  # into their hold (or not yet at `import hogwild`: either way they must not outlive the parent)
        assert trained_updates(tmp_path) == 0
        process.kill()
        process.wait(10)
        assert H.wait_for(lambda: not any(alive(pid) for pid in started), timeout=5), "workers outlived the parent"
    finally:
        process.kill()
