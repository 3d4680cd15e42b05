"""A reproduction series survives being killed: the same command with --reuse resumes the stopped run from its
last.pt to the same number of updates, with the result of a run that was never interrupted (one worker trains
deterministically, so the final held-out figures are equal), and --only-report tables the runs finished so far.
The series killed is a real process; the resumed and the uninterrupted series run in process (reproduce_pos.main)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from scripts import reproduce_pos
from tests.tasks.helpers import REPO, write_tagged

pytestmark = pytest.mark.slow


def _series(tmp_path, runs_dir, *extra):
    train = write_tagged(tmp_path / "train.txt", 150, 0)
    dev = write_tagged(tmp_path / "dev.txt", 30, 1)
    return [sys.executable, "-m", "scripts.reproduce_pos", "--train", str(train), "--dev", str(dev), "--format",
            "slash", "--epochs", "2", "--time-limit", "0", "--workers", "1", "--seeds", "0,1", "--eval-every", "75",
            "--checkpoint-every", "50", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(runs_dir),
            *extra]


def test_a_killed_series_resumes_its_stopped_run_and_reports_what_finished(tmp_path, monkeypatch, capsys):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HOGWILD_CACHE": str(tmp_path / "cache")}
    for name in ("OMP_NUM_THREADS", "HOGWILD_CACHE"):  # the in-process series (and their workers) as the killed one
        monkeypatch.setenv(name, env[name])
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    process = subprocess.Popen(_series(tmp_path, killed, "--no-adam"), cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        while not (killed / "sgd-1-seed0" / "last.pt").exists():  # the first checkpoint: seed 0 is under way
            assert process.poll() is None, process.communicate()[0]
            assert time.time() < deadline, "no checkpoint within 180 s"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # the whole series, workers included, as when a session ends
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert not (killed / "sgd-1-seed0" / "summary.json").exists()

    with pytest.raises(SystemExit, match="^--only-report: no finished run"):  # exit status 1, the line on stderr
        reproduce_pos.main(_series(tmp_path, killed, "--no-adam", "--only-report")[3:])  # in process: nothing to train

    capsys.readouterr()
    assert reproduce_pos.main(_series(tmp_path, killed, "--no-adam", "--reuse")[3:]) == 0
    resumed = capsys.readouterr().out
    assert f"[1/2] SGD, 1 worker, seed 0: resuming -> {killed / 'sgd-1-seed0'}" in resumed
    assert f"[2/2] SGD, 1 worker, seed 1: training -> {killed / 'sgd-1-seed1'}" in resumed
    log = (killed / "sgd-1-seed0" / "train.log").read_text()
    assert "resuming" in log and "at update" in log  # the run's own output went to its log, not the console

    assert reproduce_pos.main(_series(tmp_path, whole, "--no-adam", "--seeds", "0")[3:]) == 0
    first = json.loads((killed / "sgd-1-seed0" / "summary.json").read_text())
    once = json.loads((whole / "sgd-1" / "summary.json").read_text())  # one seed 0: the plain name
    assert first["updates"] == once["updates"] == 300  # 2 epochs of 150 sentences, one per update
    assert first["segments"] == 2 and first["stop_reason"] == once["stop_reason"]
    assert first["final_metrics"] == once["final_metrics"]  # the same parameters at the end
    assert first["final_train_loss"] == pytest.approx(once["final_train_loss"], rel=0.2)
    records = [json.loads(line) for line in (killed / "sgd-1-seed0" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "resume" for r in records) == 1

    from hogwild.tasks.rundir import read_curves, segment_start
    curves = read_curves(killed / "sgd-1-seed0")
    assert curves.eval_updates == sorted(curves.eval_updates) and curves.eval_updates[-1] == 300
    assert curves.loss_updates == sorted(curves.loss_updates)  # work lost in the kill is not drawn twice
    assert curves.eval_seconds == sorted(curves.eval_seconds)
    killed_time = segment_start(killed / "sgd-1-seed0")  # up to the checkpoint the second segment resumed from
    assert 0 < killed_time < curves.eval_seconds[-1] and first["wall_seconds"] > killed_time
