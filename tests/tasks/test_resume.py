"""Resume after interruption: a real SIGINT to a real `run.py` process, or its terminal closing (SIGHUP), stops it
gracefully (checkpoint, summary, exit 130); the same command with --resume continues from that update to the new stop
condition. A kill -9 leaves the last periodic last.pt, written by time by default (--checkpoint-minutes)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hogwild.share.checkpoint import read_checkpoint
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
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)  # an impatient second Ctrl-C while it stops: last.pt is written all the same
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and "interrupted" not in stderr.splitlines()[-1:], stderr
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


def checkpoint_step(path):
    return int(read_checkpoint(str(path))["global_step"])


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache")}


def _wait_for_checkpoints(process, out, count, timeout=180):
    """Until metrics.jsonl holds `count` periodic checkpoint records (last.pt rewritten count times)."""
    deadline = time.time() + timeout
    while True:
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        if sum(json.loads(line)["kind"] == "checkpoint" for line in lines if line.endswith("}")) >= count:
            return
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, f"fewer than {count} periodic checkpoints within {timeout} s"
        time.sleep(0.1)


def test_last_pt_is_written_by_time_and_survives_a_kill_9_that_resume_continues(tmp_path):
    """--checkpoint-minutes (10 by default, 0.02 here) without --checkpoint-every: last.pt is rewritten while the run
    trains; kill -9 of run.py (no handler runs; the workers die with it) leaves a whole last.pt, and --resume
    continues from its update. The killed run's scratch folder in $TMPDIR (no --max-restarts: empty by then) is
    removed by the next run."""
    out, scratch_root = tmp_path / "run", tmp_path / "tmp"
    scratch_root.mkdir()
    env = {**_env(), "TMPDIR": str(scratch_root)}
    common = [sys.executable, str(REPO / "run.py"), "--task", "pos", "--synthetic-size", "300", "--workers", "1",
              "--log-every", "10", "--eval-every", "100000", "--checkpoint-minutes", "0.02", "--out", str(out),
              "--no-progress"]
    process = subprocess.Popen([*common, "--time-limit", "300"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for_checkpoints(process, out, 2)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert not (out / "summary.json").exists()  # nothing ran after the kill
    [left] = [path for path in scratch_root.iterdir() if path.name.startswith("hogwild-")]
    assert sorted(path.name for path in left.iterdir()) == [".owner"]
    updates = checkpoint_step(out / "last.pt")  # read whole, or CheckpointError
    assert updates > 0
    done = subprocess.run([*common, "--steps", str(updates + 30), "--resume"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming {out / 'last.pt'} at update {updates}" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["updates"], summary["stop_reason"], summary["segments"]) == (updates + 30, "max_steps", 2)
    assert not [path for path in scratch_root.iterdir() if path.name.startswith("hogwild-")]


def test_a_closed_terminal_stops_the_run_like_sigterm(tmp_path):
    """run.py on a pseudo-terminal, as in an SSH session, whose other end closes (the connection drops): the kernel
    sends SIGHUP, and every later write to the terminal fails with EIO. The run stops as on SIGTERM: last.pt,
    summary.json, run.lock released, exit 130."""
    import fcntl
    import pty
    import select
    import termios
    import threading

    out = tmp_path / "run"
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), "--task", "pos", "--synthetic-size", "300",
                                "--workers", "1", "--time-limit", "300", "--checkpoint-every", "20", "--out",
                                str(out)], cwd=REPO, env=_env(), stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    shown, reading = [], threading.Event()
    reading.set()

    def read_terminal():  # as the SSH server does, so that the terminal's buffer never fills
        while reading.is_set():
            if select.select([master], [], [], 0.1)[0]:
                try:
                    shown.append(os.read(master, 65536))
                except OSError:
                    return

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        deadline = time.time() + 180
        while not (out / "last.pt").exists():
            assert process.poll() is None, b"".join(shown).decode(errors="replace")
            assert time.time() < deadline, "no checkpoint within 180 s"
            time.sleep(0.2)
        reading.clear()
        reader.join(5)
        os.close(master)  # the hang-up
        process.wait(60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, b"".join(shown).decode(errors="replace")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "signal SIGHUP" and summary["updates"] >= 20
    assert checkpoint_step(out / "last.pt") == summary["updates"]
    assert not (out / "run.lock").exists()

