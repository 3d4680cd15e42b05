"""hogwild.share.run_state: the counters' named writers and readers (snapshots, readiness, restores, the resume
position) and the phase clock of a worker's update (CPU clock here; CUDA events on a GPU). RunControl's flags:
test_run_control.py."""
import ast
import pathlib
import time

import numpy as np
import pytest
import torch

from hogwild.share import run_state
from hogwild.share.run_state import IN_PROGRESS, LAST_SEQ, STALENESS_BINS, TAKEN, PhaseClock, SharedCounters


def test_phase_clock_gives_the_time_between_consecutive_marks_and_restarts():
    clock = PhaseClock(torch.device("cpu"))
    clock.mark()
    time.sleep(0.02)
    clock.mark()
    seconds = clock.seconds()
    assert len(seconds) == 1 and seconds[0] >= 0.02
    for _ in range(4):  # the next update may mark four boundaries again: the marks restart at seconds()
        clock.mark()
    assert len(clock.seconds()) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: events time GPU work")
def test_phase_clock_times_gpu_work_not_its_launch():
    clock = PhaseClock(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda")
    clock.mark()
    for _ in range(20):
        a = a @ a / 4096
    clock.mark()
    (gpu_seconds,) = clock.seconds()  # waits for the events
    assert gpu_seconds > 0


def test_worker_view_records_updates_staleness_and_loss():
    counters = SharedCounters(2)
    view = counters.worker_view(1)
    view.applied(staleness=0, examples=4, loss=2.0, lr=0.1)
    view.applied(staleness=3, examples=4, loss=1.0, lr=0.1)
    view.applied(staleness=500, examples=4, loss=0.0, lr=0.1, phases=(0.003, 0.006, 0.0, 0.003))
    view.skipped()
    assert counters.global_updates() == 3 == view.global_updates()
    snapshot = counters.snapshot()
    assert snapshot.updates(1) == 3 and snapshot.examples(1) == 12 and snapshot.skipped() == 1
    assert snapshot.worker_updates() == [0, 3] and snapshot.last_lr() == 0.1
    mean, histogram = snapshot.staleness_summary()
    assert mean == pytest.approx(503 / 3)
    assert histogram[0] == 1 and histogram[3] == 1 and histogram[STALENESS_BINS - 1] == 1 and sum(histogram) == 3
    phases = snapshot.phase_milliseconds()
    assert phases == pytest.approx({"pull": 1.0, "compute": 2.0, "push": 0.0, "update": 1.0})  # ms per update


def test_counters_snapshot_is_a_private_copy():
    counters = SharedCounters(1)
    snapshot = counters.snapshot()
    counters.worker_view(0).applied(0, 1, 1.0, 0.1)
    assert snapshot.updates() == 0 and counters.snapshot().updates() == 1 and isinstance(snapshot.ints, np.ndarray)


def test_resume_seq_counts_in_progress_batches_as_not_trained():
    counters = SharedCounters(3)
    ints = counters.ints.numpy()  # a view: the workers' writes
    assert counters.snapshot().resume_seq(start_seq=5) == 5  # nothing taken yet
    ints[:, TAKEN], ints[:, LAST_SEQ] = [2, 3, 1], [8, 9, 7]
    assert counters.snapshot().resume_seq(0) == 10  # everyone idle: after the last ticket taken
    ints[1, IN_PROGRESS] = 9
    ints[2, IN_PROGRESS] = 7
    assert counters.snapshot().resume_seq(0) == 7


def test_readiness_is_read_by_name_and_a_restore_clears_it_with_the_ticket_bookkeeping():
    counters = SharedCounters(3)
    counters.worker_view(0).ready()
    counters.worker_view(2).ready()
    assert counters.ready_count() == 2 and not counters.all_ready() and counters.not_ready() == [1]
    view = counters.worker_view(1)
    view.ready()
    assert counters.all_ready() and counters.not_ready() == []
    view.take(7)
    view.applied(staleness=2, examples=5, loss=1.5, lr=0.1)
    saved = counters.snapshot().arrays()
    counters.load(*(torch.from_numpy(saved[name]) for name in ("ints", "floats", "staleness")))
    restored = counters.snapshot()
    assert counters.ready_count() == 0 and counters.not_ready() == [0, 1, 2]
    assert restored.updates(1) == 1 and restored.examples(1) == 5
    assert restored.staleness_summary() == (2.0, [0, 0, 1] + [0] * (STALENESS_BINS - 3))
    assert restored.resume_seq(start_seq=8) == 8  # no ticket held or taken: the checkpoint's position decides


def test_steps_and_worker_state_count_progress_in_every_mode():
    counters = SharedCounters(2)
    queue, partition = counters.worker_view(0), counters.worker_view(1)
    queue.take(0)
    queue.take(1)  # queue mode: a ticket per step, the second still training
    queue.applied(0, 4, 1.0, 0.1)
    partition.applied(0, 4, 1.0, 0.1)  # partition mode: a loss or a skip per step
    partition.skipped()
    partition.finished(epoch=1, position=2)
    before = counters.snapshot()
    assert before.steps(0) == 2.0 and before.steps(1) == 2.0
    assert before.partition_positions() == [(0, 0), (1, 2)]
    partition.finished(epoch=1, position=3)
    after = counters.snapshot()
    assert np.array_equal(after.worker_state(0), before.worker_state(0))
    assert not np.array_equal(after.worker_state(1), before.worker_state(1))


def test_mean_loss_and_phases_over_an_interval_and_per_worker():
    counters = SharedCounters(2)
    counters.worker_view(0).applied(0, 1, 4.0, 0.1, phases=(0.001, 0.002, 0.0, 0.001))
    counters.worker_view(1).applied(0, 1, 2.0, 0.2)
    first = counters.snapshot()
    counters.worker_view(0).applied(0, 1, 1.0, 0.05)
    second = counters.snapshot()
    assert first.mean_loss() == 3.0 and second.mean_loss() == pytest.approx(7 / 3)
    assert second.mean_loss(first) == 1.0 and second.mean_loss(first, worker=1) is None
    assert second.mean_loss(worker=1) == 2.0 and second.last_lr() == 0.2
    assert first.phase_milliseconds() == pytest.approx({"pull": 0.5, "compute": 1.0, "push": 0.0, "update": 0.5})
    assert second.phase_milliseconds(first) == {"pull": 0.0, "compute": 0.0, "push": 0.0, "update": 0.0}


ENGINE = pathlib.Path(run_state.__file__).resolve().parents[1]  # hogwild/
LAYOUT = {name for name, value in vars(run_state).items()  # the column constants and sizes of the shared arrays
          if name.lstrip("_").isupper() and isinstance(value, (int, slice, tuple))}
ARRAYS = {"ints", "floats", "staleness", "_flags", "_view"}


def layout_reads(source: str) -> list[str]:
    """What a module takes of the run state's layout: column constants imported or named through the module, and
    its arrays indexed (`counters.ints[...]`, `snapshot["ints"][...]`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("run_state"):
            found += [f"import {alias.name}" for alias in node.names if alias.name in LAYOUT]
        elif isinstance(node, ast.Attribute) and node.attr in LAYOUT:
            found.append(f"{ast.unparse(node)}")
        elif isinstance(node, ast.Subscript):
            array = node.value
            if isinstance(array, ast.Attribute) and array.attr in ARRAYS or (
                    isinstance(array, ast.Subscript) and isinstance(array.slice, ast.Constant)
                    and array.slice.value in ARRAYS):
                found.append(ast.unparse(node))
    return found


def test_no_engine_module_outside_run_state_reads_its_layout():
    assert len(LAYOUT) >= 15 and {"READY", "UPDATES", "PHASE_COLUMNS", "_STOP"} <= LAYOUT
    offenders = {str(path.relative_to(ENGINE)): reads for path in sorted(ENGINE.rglob("*.py"))
                 if path != pathlib.Path(run_state.__file__).resolve() and (reads := layout_reads(path.read_text()))}
    assert offenders == {}, "use run_state's named readers and writers (SharedCounters, CounterSnapshot, WorkerView)"
    assert layout_reads(pathlib.Path(run_state.__file__).read_text())  # the check sees what run_state itself does
    assert layout_reads("from .run_state import READY\nx = counters.ints[:, 0]\ny = snap['floats'][0]\n") == [
        "import READY", "counters.ints[:, 0]", "snap['floats'][0]"]
