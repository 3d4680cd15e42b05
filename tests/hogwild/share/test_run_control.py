"""hogwild.share.run_state.RunControl: the first stop reason wins, the start time and the deadline, and a spawned
process shares the flags both ways."""
import multiprocessing
import pickle
import time

from hogwild.share.run_state import RunControl


def test_the_first_stop_reason_wins_and_a_reasonless_stop_keeps_it_open():
    control = RunControl()
    assert not control.stopping and control.stop_reason is None
    control.request_stop()  # the supervisor stopping the workers: no reason of its own
    assert control.stopping and control.stop_reason is None
    control.request_stop("time_limit")
    control.request_stop("signal SIGINT")
    assert control.stop_reason == "time_limit"


def test_the_start_time_gives_the_workers_deadline():
    control = RunControl()
    assert not control.started
    assert control.wait_for_start(lambda: True, 5.0) == 5.0  # stopped before the start: returns at once
    control.mark_started(1000.25)
    assert control.started
    assert control.wait_for_start(lambda: False, 10.0) == 1010.25
    assert control.wait_for_start(lambda: False, None) is None


def test_a_pickled_copy_carries_the_flags_but_not_the_parents_reason():
    control = RunControl()
    control.request_stop("target")
    copy = pickle.loads(pickle.dumps(control))
    assert copy.stopping and not copy.started and copy.stop_reason is None


def _worker(control, seen):
    seen.put(control.wait_for_start(lambda: False, 2.0))  # blocks until the parent marks the start
    while not control.stopping:
        time.sleep(0.002)
    control.mark_started(7.0)  # a worker never does this; here it shows the write reaches the parent


def test_a_spawned_process_sees_the_start_and_the_stop_and_its_writes_reach_the_parent():
    ctx = multiprocessing.get_context("spawn")
    control, seen = RunControl(), ctx.Queue()
    process = ctx.Process(target=_worker, args=(control, seen))
    process.start()
    control.mark_started(100.0)
    assert seen.get(timeout=120) == 102.0
    control.request_stop("epochs")
    process.join(120)
    assert process.exitcode == 0
    assert control.wait_for_start(lambda: False, 1.0) == 8.0
