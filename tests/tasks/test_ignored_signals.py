"""A run started with SIGHUP and SIGINT ignored (`nohup python run.py ... &` from a script: nohup ignores SIGHUP, a
background job without job control SIGINT) keeps them ignored in every phase: hang-ups and Ctrl-Cs meant for others,
sent to its process group from start to end, neither stop it nor change what it writes. SIGTERM still stops it.
The engine's graceful stop used to take SIGHUP over: a nohup run ended "done (signal SIGHUP)" when the terminal
closed."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.tasks.helpers import REPO

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache")}
IGNORED = (signal.SIGHUP, signal.SIGINT)


def _as_nohup_in_the_background():
    for number in IGNORED:
        signal.signal(number, signal.SIG_IGN)


def _start(out, steps, extra=()):
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "--synthetic-size", "200", "--workers", "1",
                             "--steps", str(steps), "--no-progress", "--out", str(out), *extra], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_as_nohup_in_the_background)


def test_signals_ignored_at_start_stay_ignored_from_the_imports_to_the_summary(tmp_path):
    out = tmp_path / "run"
    process = _start(out, steps=300)
    sent = 0
    try:
        deadline = time.monotonic() + 180
        while process.poll() is None and time.monotonic() < deadline:  # imports, data, start-up, training, the end
            for number in IGNORED:
                os.killpg(process.pid, number)
            sent += 1
            time.sleep(0.1)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0 and sent > 20, stdout + stderr
    assert "Traceback" not in stderr and "signal SIG" not in stdout + stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["stop_reason"], summary["updates"]) == ("max_steps", 300)


def test_sigterm_still_stops_a_run_that_ignores_hang_ups(tmp_path):
    out = tmp_path / "run"
    process = _start(out, steps=100000, extra=("--log-every", "10"))
    metrics = out / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 180
        while '"kind": "train"' not in (metrics.read_text() if metrics.exists() else ""):  # training is under way
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGHUP)
        time.sleep(0.5)
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stdout + stderr
    assert json.loads((out / "summary.json").read_text())["stop_reason"] == "signal SIGTERM", stdout + stderr
