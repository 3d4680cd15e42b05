"""hogwild.parent.metrics: per-interval rates, losses, staleness summary, JSON lines."""
import json

import pytest

from hogwild.parent.metrics import MetricsLog
from hogwild.share.run_state import SharedCounters


def test_records_give_interval_rates_and_losses(tmp_path):
    counters = SharedCounters(2)
    log = MetricsLog(str(tmp_path), workers=2, total=10, progress=False, tensorboard=False,
                     initial=counters.snapshot())
    for worker, loss in ((0, 4.0), (1, 2.0)):
        counters.worker_view(worker).applied(1, 10, loss, 0.5)
    first = log.record(counters.snapshot())
    counters.worker_view(0).applied(0, 10, 1.0, 0.25)
    second = log.record(counters.snapshot())
    assert first["updates"] == 2 and first["loss"] == 3.0 and first["skipped"] == 0
    assert second["updates"] == 3 and second["loss"] == 1.0  # only the interval's update
    assert second["workers"][0]["loss"] == 1.0 and second["workers"][1]["loss"] is None
    assert second["workers"][1]["updates_per_s"] == 0.0 and second["workers"][0]["updates_per_s"] > 0
    assert second["staleness_mean"] == pytest.approx(2 / 3)
    log.evaluation(3, {"acc": 0.5}, final=True)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["train", "train", "final_eval"]
    assert lines[2]["metrics"] == {"acc": 0.5}


def test_rates_count_from_the_start_of_training_not_of_spawning(monkeypatch, capsys):
    """30 s of start-up, then 10 updates in 2 s: the first record says 5 updates/s (it said 10 / 32), and a
    progress line counts its seconds of training from there too."""
    from types import SimpleNamespace

    from hogwild.parent import metrics
    clock = [1000.0]
    monkeypatch.setattr(metrics, "time", SimpleNamespace(time=lambda: clock[0]))
    counters = SharedCounters(1)
    log = MetricsLog(None, workers=1, total=100, progress=True, tensorboard=False, initial=counters.snapshot())
    log.bar.clock = lambda: clock[0]  # PlainProgress: stderr is pytest's capture, not a terminal
    clock[0] += 30.0
    log.training_started(clock[0])
    for _ in range(10):
        counters.worker_view(0).applied(0, 1, 1.0, 0.1)
    clock[0] += 2.0
    assert log.record(counters.snapshot())["updates_per_s"] == 5.0
    log.progress(counters.snapshot())
    log.close()
    assert capsys.readouterr().err.splitlines() == [
        "progress: 10/100 updates (10%) after 2 s of training, 5.0 updates/s since the previous line, loss 1"]


def test_tensorboard_events_are_written_when_tensorboard_is_installed(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed")
    counters = SharedCounters(1)
    log = MetricsLog(str(tmp_path), workers=1, total=None, progress=False, tensorboard=True)
    counters.worker_view(0).applied(0, 1, 1.0, 0.1)
    log.record(counters.snapshot())
    log.close()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0


def test_a_log_file_gets_plain_progress_lines_not_redraws(tmp_path, capsys):
    """stderr not a terminal (a log file, here pytest's capture): MetricsLog shows PlainProgress, which prints a line
    every `every` seconds of its clock and one at the end, and never a carriage return."""
    from hogwild.parent.metrics import PlainProgress
    log = MetricsLog(None, workers=1, total=100, progress=True, tensorboard=False)
    assert isinstance(log.bar, PlainProgress)
    log.close()
    now = [0.0]
    bar = PlainProgress(400, every=30.0, clock=lambda: now[0])
    for _ in range(10):  # 10 s of updates, 4 per second: under the interval, silent
        now[0] += 1.0
        bar.update(4)
    assert capsys.readouterr().err == ""
    bar.set_postfix(loss="2.5")
    for _ in range(25):
        now[0] += 1.0
        bar.update(4)
    bar.update(0)
    now[0] += 5.0
    bar.update(10)
    bar.close()
    assert capsys.readouterr().err.splitlines() == [
        "progress: 120/400 updates (30%) after 30 s of training, 4.0 updates/s since the previous line, loss 2.5",
        "progress: 150/400 updates (38%) after 40 s of training, 3.0 updates/s since the previous line, loss 2.5"]
