"""hogwild.parent.progress_watch: the bound scales with each worker's median step, the parent's own pauses do not count,
and in a real run a worker stopped with SIGSTOP is named, killed and the run checkpointed and failed."""
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import hogwild
from hogwild.parent.progress_watch import HANG_STEPS, ProgressWatch
from hogwild.share.run_state import LOSS_COUNT, STALENESS_BINS, TAKEN, UPDATES, CounterSnapshot
from tests.hogwild import engine_helpers as H
from tests.hogwild.parent.test_supervisor import alive, config, trained_updates


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def rows(steps: list[int]) -> CounterSnapshot:
    """A snapshot of workers that each took and applied `steps[w]` steps."""
    ints, floats = np.zeros((len(steps), 10), dtype=np.int64), np.zeros((len(steps), 7))
    for worker, count in enumerate(steps):
        ints[worker, TAKEN] = ints[worker, UPDATES] = count
        floats[worker, LOSS_COUNT] = count
    return CounterSnapshot(ints, floats, np.zeros((len(steps), STALENESS_BINS), dtype=np.int64))


def test_the_bound_is_the_timeout_or_twenty_median_steps_whichever_is_longer():
    clock = FakeClock()
    watch = ProgressWatch(2, hang_timeout=3.0, clock=clock)
    assert watch.observe(rows([0, 0]), [True, True]) == []
    assert watch.bound(0) == 3.0 and watch.median_step(0) is None  # before the first step: the timeout alone
    for tick in range(1, 11):  # worker 0: 4 steps per 0.5 s (0.125 s each); worker 1: one 0.5 s step per tick
        clock.now += 0.5
        assert watch.observe(rows([4 * tick, tick]), [True, True]) == []
    assert watch.median_step(0) == 0.125 and watch.bound(0) == 3.0  # 20 x 0.125 = 2.5 < 3
    assert watch.median_step(1) == 0.5 and watch.bound(1) == HANG_STEPS * 0.5 == 10.0
    hung = []
    for _ in range(6):  # both stop: worker 0 is hung after 3 s; worker 1 (slow steps) is not yet
        clock.now += 0.5
        hung = watch.observe(rows([40, 10]), [True, True])
    assert [worker for worker, _ in hung] == [0] and watch.stalled[0] == 3.0
    assert "worker" not in hung[0][1] and "made no progress for 3 s" in hung[0][1]
    assert "20 x its median step of 0.125 s" in hung[0][1]
    for _ in range(14):
        clock.now += 0.5
        hung = watch.observe(rows([40, 10]), [True, True])
    assert [worker for worker, _ in hung] == [0, 1]  # worker 1 after 20 of its steps


def test_a_paused_parent_counts_at_most_a_second_per_check_and_exited_workers_are_not_hung():
    clock = FakeClock()
    watch = ProgressWatch(2, hang_timeout=2.0, clock=clock)
    watch.observe(rows([1, 1]), [True, True])
    clock.now += 3600  # Ctrl-Z stopped the whole process group for an hour
    assert watch.observe(rows([1, 1]), [True, True]) == [] and watch.stalled == [1.0, 1.0]
    clock.now += 1.0
    assert [worker for worker, _ in watch.observe(rows([1, 1]), [True, False])] == [0]  # worker 1 has exited


def test_a_late_worker_is_hung_only_when_it_had_stalled_for_twenty_of_its_steps():
    clock = FakeClock()
    watch = ProgressWatch(1, hang_timeout=60.0, clock=clock)
    for tick in range(3):
        watch.observe(rows([tick]), [True])
        clock.now += 1.0  # 1 s steps
    assert watch.describe_late(0, waited=10.0) is None  # a slow step, not a hang
    text = watch.describe_late(0, waited=25.0)
    assert text.startswith("made no progress for 25 s (20 x its median step of 1 s) and did not finish its step "
                           "within 25 s of the stop request")
    assert ProgressWatch(1, hang_timeout=None).describe_late(0, 100.0) is None


def stop_worker_once_it_trained(run_dir, stopped: dict, updates: int = 4) -> None:
    def target():
        return [p for p in multiprocessing.active_children() if p.name == "hogwild-worker-1"]
    if H.wait_for(lambda: target() and trained_updates(run_dir) >= updates, timeout=120):
        stopped["pid"] = target()[0].pid
        os.kill(stopped["pid"], signal.SIGSTOP)
        stopped["time"] = time.monotonic()


def test_a_stopped_worker_holding_the_last_step_is_named_killed_and_checkpointed(tmp_path):
    """The reported case: a --steps run, one worker stopped with SIGSTOP; the other uses up the steps and exits,
    the stopped one holds a claimed step slot. The run once waited forever; now it names the worker within the
    bound, kills it, writes last.pt and fails."""
    stopped = {}
    threading.Thread(target=stop_worker_once_it_trained, args=(tmp_path, stopped), daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed) as caught:
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16),
                      config(tmp_path, epochs=None, max_steps=60, log_every=1, hang_timeout=2.0))
    message = str(caught.value)
    assert caught.value.worker == 1, message
    assert f"worker 1 (cpu, pid {stopped['pid']}) made no progress for " in message
    assert "hung (stopped, deadlocked or stuck in I/O); killed" in message
    assert 2.0 <= time.monotonic() - stopped["time"] < 15.0
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    assert 4 <= saved["global_step"] < 60
    assert multiprocessing.active_children() == [] and not alive(stopped["pid"])


def test_a_stopped_worker_that_ignores_a_stop_request_is_named(tmp_path):
    """A time limit or a signal shorter than the hang bound once stopped the run silently, the stopped worker killed
    as if merely slow. Here SIGINT comes 3 s after the SIGSTOP (the hang bound is 60 s), once the workers have made 20
    updates (about 0.05 s each: 20 of them take 1 s): the worker ignores the stop for join_timeout after 20 of its
    steps without progress, and is named as hung."""
    stopped = {}

    def stop_then_interrupt():
        stop_worker_once_it_trained(tmp_path, stopped, updates=20)
        time.sleep(3.0)
        os.kill(os.getpid(), signal.SIGINT)  # the parent's graceful stop, as a time limit requests it

    threading.Thread(target=stop_then_interrupt, daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed) as caught:
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16),
                      config(tmp_path, log_every=1, join_timeout=1.0))
    message = str(caught.value)
    assert caught.value.worker == 1 and "did not finish its step within 1 s of the stop request" in message, message
    assert (tmp_path / "last.pt").exists()
    assert multiprocessing.active_children() == [] and not alive(stopped["pid"])


def test_a_fast_worker_waiting_at_max_steps_for_a_slow_ones_updates_is_not_hung(tmp_path):
    """At max_steps the feed deals nothing more until every dealt update has landed; a fast worker then waits on the
    feed while a slow one trains what it holds. That wait is no hang (it was declared one after hang_timeout, failing
    the run at its very end), and the slow worker holds little, so the tail stays short; exactly max_steps."""
    result = hogwild.train(H.regression_model(), H.uneven_loss, H.regression_batches(n=400),
                           config(tmp_path, max_steps=150, hang_timeout=1.0, threads_per_worker=1))
    assert (result.updates, result.stop_reason) == (150, "max_steps")
    fast, slow = result.worker_updates
    assert fast > slow and slow <= 2 * 25 + 25  # 25 tickets an item: at most two items in hand and one in training
