"""Resume after interruption: a real SIGINT to a real `run.py` process stops it gracefully (checkpoint, summary,
exit 130); the same command with --resume continues from that update to the new stop condition."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.tasks.helpers import REPO

pytestmark = pytest.mark.slow


def test_sigint_then_resume_continues_from_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    common = [sys.executable, str(REPO / "run.py"), "--task", "pos", "--synthetic-size", "300", "--workers", "2",
              "--optimizer", "adam", "--checkpoint-every", "20", "--log-every", "10", "--eval-every", "50",
              "--out", str(out), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([*common, "--time-limit", "300"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not (out / "last.pt").exists():  # the first periodic checkpoint: training is under way
            assert process.poll() is None, process.communicate()
            assert time.time() < deadline, "no checkpoint within 180 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    first = json.loads((out / "summary.json").read_text())
    assert first["stop_reason"] == "signal SIGINT" and first["heldout"] is None
    assert 20 <= first["updates"] < 2000
    assert f"--resume --out {out}" in stdout

    target = first["updates"] + 60
    done = subprocess.run([*common, "--steps", str(target), "--resume"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming {out / 'last.pt'} at update {first['updates']}" in done.stdout
    second = json.loads((out / "summary.json").read_text())
    assert second["stop_reason"] == "max_steps"
    assert second["updates"] == target  # update slots are claimed atomically: never over --steps
    assert second["segments"] == 2
    assert second["wall_seconds"] > first["wall_seconds"]
    lines = (out / "command.txt").read_text().splitlines()
    assert len(lines) == 2 and lines[1].endswith("--resume")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_updates = [r["updates"] for r in records if r["kind"] == "train"]
    assert train_updates == sorted(train_updates)  # the second segment continues the update count
    assert [r["updates"] for r in records if r["kind"] == "eval"][0] == 0  # only the fresh run evaluates update 0
    assert sum(1 for r in records if r["kind"] == "eval" and r["updates"] == 0) == 1
