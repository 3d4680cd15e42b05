"""Config.max_restarts with real workers and real signals: a worker killed (`kill -9`) or stopped (`kill -STOP`, found
hung) is replaced by a fresh process and the run ends at exactly its update count, with a restart record in
metrics.jsonl; a worker that dies at once on every start uses up the restarts and the run stops naming it, last.pt
whole. The bookkeeping behind it (a dead worker's tickets dealt again once): tests/hogwild/feed/test_feed.py."""
import json
import multiprocessing
import os
import signal
import threading

import pytest
import torch

import hogwild
from tests.hogwild import engine_helpers as H
from tests.hogwild.parent.test_supervisor import alive, config, trained_updates


def records(run_dir, kind):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def signal_worker_one(run_dir, signum, seen: dict, updates: int = 4, then=None) -> None:
    """Once the run has made `updates` updates, send `signum` to worker 1 (and call `then` just before)."""
    def target():
        return [p for p in multiprocessing.active_children() if p.name == "hogwild-worker-1"]
    if H.wait_for(lambda: target() and trained_updates(run_dir) >= updates, timeout=120):
        if then is not None:
            then()
        seen["pid"] = target()[0].pid
        os.kill(seen["pid"], signum)


def test_a_killed_worker_is_replaced_and_the_run_ends_at_exactly_max_steps(tmp_path):
    seen = {}
    threading.Thread(target=signal_worker_one, args=(tmp_path, signal.SIGKILL, seen), daemon=True).start()
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16),
                           config(tmp_path, epochs=None, max_steps=60, log_every=1, max_restarts=1))
    assert (result.updates, sum(result.worker_updates), result.stop_reason) == (60, 60, "max_steps")
    assert result.restarts == 1
    [restart] = records(tmp_path, "restart")
    assert restart["worker"] == 1 and restart["restarts"] == 1
    assert restart["reason"] == f"worker 1 (cpu, pid {seen['pid']}) was killed by signal SIGKILL"
    assert torch.load(tmp_path / "last.pt", weights_only=False)["global_step"] == 60
    assert multiprocessing.active_children() == []


def test_a_stopped_worker_found_hung_is_replaced_and_every_batch_is_counted_once(tmp_path):
    """2 epochs of 16 batches: the stopped worker's tickets (queued, received, mid-step) are dealt again, so the run
    ends at exactly 32 updates: a lost batch would end it below, one counted twice above."""
    seen = {}
    threading.Thread(target=signal_worker_one, args=(tmp_path, signal.SIGSTOP, seen), daemon=True).start()
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16),
                           config(tmp_path, epochs=2, log_every=1, hang_timeout=2.0, max_restarts=1))
    assert (result.updates, result.stop_reason, result.restarts) == (32, "epochs", 1)
    [restart] = records(tmp_path, "restart")
    assert restart["worker"] == 1 and restart["reason"].startswith(f"worker 1 (cpu, pid {seen['pid']}) made no "
                                                                   f"progress for ")
    assert "hung (stopped, deadlocked or stuck in I/O); killed" in restart["reason"]
    assert not alive(seen["pid"]) and multiprocessing.active_children() == []


def test_a_worker_that_dies_at_once_on_every_start_uses_up_the_restarts_and_the_run_stops(tmp_path, monkeypatch):
    """Worker 1 is killed; each replacement is spawned with HOGWILD_TEST_DIE_AT_START set and raises at its first
    step (as on a broken device): after 2 restarts the run stops as without restarts, naming it, last.pt whole."""
    monkeypatch.delenv("HOGWILD_TEST_DIE_AT_START", raising=False)
    seen = {}
    poison = lambda: os.environ.__setitem__("HOGWILD_TEST_DIE_AT_START", "1")  # noqa: E731 - for replacements only
    threading.Thread(target=signal_worker_one, args=(tmp_path, signal.SIGKILL, seen, 4, poison), daemon=True).start()
    try:
        with pytest.raises(hogwild.WorkerFailed) as caught:
            hogwild.train(H.regression_model(), H.dies_after_a_restart_loss, H.regression_batches(n=16),
                          config(tmp_path, log_every=1, max_restarts=2))
    finally:
        os.environ.pop("HOGWILD_TEST_DIE_AT_START", None)
    message = str(caught.value)
    assert caught.value.worker == 1 and "worker 1 (cpu, pid " in message and "raised an exception" in message
    assert "RuntimeError: deliberate failure: this worker dies at once" in message
    assert "(after 2 restart(s); Config.max_restarts / --max-restarts is 2)" in message
    restarts = records(tmp_path, "restart")
    assert [(r["worker"], r["restarts"]) for r in restarts] == [(1, 1), (1, 2)]
    assert restarts[0]["reason"].endswith("was killed by signal SIGKILL")
    assert "deliberate failure" in restarts[1]["reason"]
    [stop] = records(tmp_path, "stop")
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    assert saved["global_step"] == stop["updates"] >= 4
    assert multiprocessing.active_children() == []
