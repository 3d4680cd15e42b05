"""bench/gpu_check.sh: its budget (a step past its limit is cut and reported, never left hanging), what a check killed
mid-stage has published, its chains side by side and its steps, and its CPU mode end to end."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

def gpu_check(out: Path, script: str, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "HOGWILD_GPU_CHECK_CPU": "1", **env}
    return subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900, env=full)


def test_gpu_check_cuts_a_step_past_its_limit_and_skips_what_no_longer_fits(tmp_path):
    began = time.monotonic()
    done = gpu_check(tmp_path, "source bench/gpu_check.sh; begin; BUDGET_S=12; step a fast 5 1 true; "
                               "step a slow 3 1 sleep 60; step b later 30 10 true; exit $(failed_steps)")
    assert time.monotonic() - began < 20 and done.returncode == 1, done.stdout + done.stderr
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert lines[0] == "stage 0 setup        not reached"
    assert lines[1] == "stage a step-check   failed" and lines[2].startswith("    fast             ok ")
    assert lines[3].startswith("    slow             timed out (limit 3s) ") and lines[3].split()[-1] in ("3s", "4s")
    assert lines[4] == "stage b one-worker   cut (a step skipped for time)"
    assert lines[5].startswith("    later            skipped (") and lines[5].endswith("needs 10s) 0s")
    assert lines[6:8] == ["stage c tests        not reached", "stage d more         not reached"]
    assert lines[8].startswith("total ") and len(lines) == 9
    log = (tmp_path / "step-check.log").read_text()
    assert "=== slow (limit 3s, " in log and "=== slow: timed out (limit 3s) after " in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extras.tgz", "step-check.log", "summary.txt"]


def test_a_check_killed_mid_stage_has_published_what_it_measured(tmp_path):
    """SIGKILL (no trap runs) during stage b: summary.txt names stage a done, b running, c and d not reached, and
    stage a's log and extras are there."""
    script = ("source bench/gpu_check.sh; begin; echo 'verdict: OK' > $WORK/extras/a.json; "
              "step a step-check 10 1 echo 'verdict: OK'; publish; step b one-worker 30 1 sleep 30")
    check = subprocess.Popen(["bash", "-c", script], cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                             env={**os.environ, "OUT": str(tmp_path), "HOGWILD_GPU_CHECK_CPU": "1"})
    summary = tmp_path / "summary.txt"
    try:
        deadline = time.monotonic() + 20
        while "stage b one-worker   running" not in (summary.read_text() if summary.exists() else ""):
            assert time.monotonic() < deadline and check.poll() is None, "stage b never started"
            time.sleep(0.1)
    finally:
        os.killpg(check.pid, signal.SIGKILL)
        check.wait()
    lines = summary.read_text().splitlines()
    assert lines[:2] == ["stage 0 setup        not reached", "stage a step-check   done"]
    assert lines[2].startswith("    step-check       ok ")
    assert lines[3:7] == ["stage b one-worker   running", "    one-worker       running 0s",
                          "stage c tests        not reached", "stage d more         not reached"]
    assert "verdict: OK" in (tmp_path / "step-check.log").read_text()
    assert subprocess.run(["tar", "tzf", str(tmp_path / "extras.tgz")], capture_output=True,
                          text=True).stdout.split() == ["extras/", "extras/a.json"]


def test_gpu_check_runs_chains_side_by_side_and_names_the_failed_tests(tmp_path):
    """Two chains of sleeps side by side take the longer chain's time, not the sum; each step's output lands whole in
    the stage's log; a test step's failed tests are named under its stage (from pytest -v's lines), and a failure in
    a background chain makes the exit status 1."""
    log = tmp_path / "pytest-output.txt"
    log.write_text("tests/a.py::test_one PASSED  [ 50%]\ntests/a.py::test_two[cuda] FAILED  [100%]\n"
                   "FAILED tests/a.py::test_two[cuda] - AssertionError\n")
    out = tmp_path / "out"
    began = time.monotonic()
    done = gpu_check(out, "source bench/gpu_check.sh; begin; BUDGET_S=60; "
                          "one() { step d a 10 1 bash -c 'echo a1; sleep 2; echo a2'; step d b 10 1 sleep 1; }; "
                          f"two() {{ step d tests 10 1 bash -c 'cat {log}; sleep 3; exit 1'; }}; "
                          "side_by_side one two; exit $(failed_steps)")
    assert 3 <= time.monotonic() - began < 6 and done.returncode == 1, done.stdout + done.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    stage = summary[summary.index("stage d more         failed") + 1:-1]
    assert sorted(line.split()[0] for line in stage) == ["a", "b", "tests", "tests|"]
    assert "    tests| tests/a.py::test_two[cuda] FAILED  [100%]" in stage
    more = (out / "more.log").read_text()
    assert "a1\na2\n=== a: ok after " in more and more.index("=== b (") > more.index("=== a: ok")


@pytest.mark.slow
def test_gpu_check_runs_every_stage_on_the_cpu_in_order(tmp_path):
    done = gpu_check(tmp_path, "bash bench/gpu_check.sh", BUDGET_S="800")
    summary = (tmp_path / "summary.txt").read_text()
    assert done.returncode == 0, summary + done.stdout[-3000:] + done.stderr[-3000:]
    lines = summary.splitlines()
    assert lines[0].startswith("gpu_check ") and lines[0].endswith("mode cpu") and lines[-1].startswith("total ")
    stages = [line for line in lines if line.startswith("stage ")]
    assert stages == [f"stage {s} {name:12} done" for s, name in (("0", "setup"), ("a", "step-check"),
                                                                   ("b", "one-worker"), ("c", "tests"), ("d", "more"))]
    steps = [line.split()[:2] for line in lines if line.startswith("    ")]
    assert {status for _, status in steps} == {"ok"}
    names = [name for name, _ in steps]
    assert names[:6] == ["modules", "step-check", "one-worker", "tests", "workers", "bf16"]
    assert sorted(names[6:-1]) == ["run-nmt", "run-pos", "tag", "tests-compiled", "translate"]
    assert names[-1] == "step-costs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extras.tgz", "more.log", "one-worker.json",
                                                         "one-worker.log", "step-check.log", "summary.txt",
                                                         "tests.log"]  # flat, at most 8: the device tool's limit
    step_check = (tmp_path / "step-check.log").read_text()
    assert step_check.index("verdict: OK") < step_check.index("=== step-check: ok")
    runs = json.loads((tmp_path / "one-worker.json").read_text())["runs"]
    assert [(r["task"], r["variant"], r["step"]) for r in runs] == [
        (task, variant, step) for task in ("pos", "nmt") for variant, step in (("plain-graphed", None),
                                                                               ("engine", "graphed"))]
    more = (tmp_path / "more.log").read_text()
    assert "/" in more.split("=== tag (", 1)[1]  # the tagged words
    assert "verdict" not in more and re.search(r"^pos bf16 graphed padded +\d", more, re.M)  # the step costs alone
    extras = subprocess.run(["tar", "tzf", str(tmp_path / "extras.tgz")], capture_output=True, text=True).stdout
    assert {"extras/more-workers.json", "extras/more-bf16.json", "extras/tests.xml", "extras/tests-compiled.xml",
            "extras/runs/pos/summary.json", "extras/runs/nmt/summary.json"} <= set(extras.split())
