"""bench/gpu_check.sh: its budget (a step past its limit is cut and reported, never left hanging), what a check killed
mid-stage has published, its chains side by side and its steps; and its CPU mode end to end, run once for the module:
every stage in order, and from the same run the two benches' quick CPU runs it holds, checked here instead of being
run again: bench_gpu's (stage b: every row as the docstring shows) and gpu_step_check's (stage a's checks, stage d's
step costs)."""
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


def test_a_check_killed_mid_stage_has_published_what_it_measured(tmp_path, tmp_path_factory):
    """SIGKILL (no trap runs) during stage b: summary.txt names stage a done, b running, c and d not reached, and
    stage a's log and extras are there. The scratch folder the trap would have removed is in $TMPDIR (here the
    test's own, not /tmp, where each run left one)."""
    scratch = tmp_path_factory.mktemp("scratch")
    script = ("source bench/gpu_check.sh; begin; echo 'verdict: OK' > $WORK/extras/a.json; "
              "step a step-check 10 1 echo 'verdict: OK'; publish; step b one-worker 30 1 sleep 30")
    check = subprocess.Popen(["bash", "-c", script], cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                             env={**os.environ, "OUT": str(tmp_path), "HOGWILD_GPU_CHECK_CPU": "1",
                                  "TMPDIR": str(scratch)})
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
    assert [p.name[:10] for p in scratch.iterdir()] == ["gpu-check."]


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


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory):
    """`bash bench/gpu_check.sh` in its CPU mode, once -> (its $OUT folder, the finished process). Without the
    corpora, as every test not marked `corpora` (a module's fixture is made before the autouse one hides them)."""
    out = tmp_path_factory.mktemp("gpu-check")
    hidden = str(tmp_path_factory.getbasetemp() / "corpora-hidden")
    return out, gpu_check(out, "bash bench/gpu_check.sh", BUDGET_S="800", HOGWILD_CORPORA=hidden)


def step_output(log: str, name: str) -> str:
    """What step `name` printed, from a stage's log: the lines between its '=== name (limit ...' header and its
    '=== name: <status> after' line."""
    return log.split(f"=== {name} (limit ", 1)[1].split("\n", 1)[1].split(f"=== {name}: ", 1)[0]


@pytest.mark.slow(first=True)
def test_gpu_check_runs_every_stage_on_the_cpu_in_order(cpu_check):
    out, done = cpu_check
    summary = (out / "summary.txt").read_text()
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
    assert sorted(p.name for p in out.iterdir()) == ["extras.tgz", "more.log", "one-worker.json", "one-worker.log",
                                                    "step-check.log", "summary.txt", "tests.log"]  # flat, at most 8
    step_check = (out / "step-check.log").read_text()
    assert step_check.index("verdict: OK") < step_check.index("=== step-check: ok")
    runs = json.loads((out / "one-worker.json").read_text())["runs"]
    assert [(r["task"], r["variant"], r["workers"], r["step"]) for r in runs] == [
        (task, variant, workers, step) for task in ("pos", "nmt") for variant, workers, step in (
            ("plain", 1, None), ("plain-graphed", 1, None), ("engine", 1, "eager"), ("engine", 2, "eager"))]
    more = (out / "more.log").read_text()
    assert "/" in more.split("=== tag (", 1)[1]  # the tagged words
    assert "verdict" not in more and re.search(r"^pos bf16 graphed padded +\d", more, re.M)  # the step costs alone
    extras = subprocess.run(["tar", "tzf", str(out / "extras.tgz")], capture_output=True, text=True).stdout
    assert {"extras/more-workers.json", "extras/more-bf16.json", "extras/tests.xml", "extras/tests-compiled.xml",
            "extras/runs/pos/summary.json", "extras/runs/nmt/summary.json"} <= set(extras.split())
    workers = json.loads(subprocess.run(["tar", "xzOf", str(out / "extras.tgz"), "extras/more-workers.json"],
                                        capture_output=True, text=True).stdout)["runs"]
    assert [(r["task"], r["variant"], r["workers"], r["step"]) for r in workers] == [("pos", "engine", 2, "graphed")]


def table_row(out: str, task: str, variant: str, workers: int) -> list[str]:
    """The fields of the task's table row for (variant, workers)."""
    section = out.split(f"\n{task}: ", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in section.splitlines() if line.startswith(f"  {variant} ")]
    return next(row for row in rows if row[1] == str(workers))


@pytest.mark.slow
def test_bench_gpu_quick_run_on_the_cpu_as_the_docstring_shows(cpu_check):
    """Stage b in CPU mode is `python -m bench.bench_gpu --device cpu --quick` with every CPU variant, 1 and 2
    workers: its output and --json as a user gets them."""
    out, done = cpu_check
    assert "    one-worker       ok " in (out / "summary.txt").read_text(), done.stdout[-3000:]
    output = step_output((out / "one-worker.log").read_text(), "one-worker")
    saved = json.loads((out / "one-worker.json").read_text())
    command = ("python -m bench.bench_gpu --device cpu --quick --tasks pos,nmt --variants plain,plain-graphed,engine "
               "--worker-counts 1,2 --repeats 1 --json")
    lines = output.splitlines()
    assert lines[0].startswith(f"command: {command}") and lines[-1].startswith(f"command: {command}")
    assert "NOT MEASURED" not in output
    for task in ("pos", "nmt"):
        assert f"\n{task}: preset small" in output
        assert table_row(output, task, "plain", 1)[8] == "1.000"  # x plain
        graphed = table_row(output, task, "plain-graphed", 1)
        assert graphed[9] == "1.000" and graphed[10] == "16" and re.fullmatch(r"\d+/0", graphed[14])  # timed; graphs
        engine = table_row(output, task, "engine", 2)  # ... GPU %, source, graphs/eager, eager %, 4 phases (run clock)
        assert engine[14:16] == ["0/0", "-"] and len(engine) in (20, 22)  # graphs auto: none on the CPU
    paper = [line.split() for line in lines if re.match(r"  [1-4] {4}", line)]
    assert [row[0] for row in paper] == ["1", "2", "3", "4"] * 2
    assert [row[4] for row in paper] == ["26.89", "16.56", "9.24", "6.96"] * 2  # the paper's column, by its field
    assert output.count("cycle = pull + compute + push + update") == 2  # the CPU quick run: serial
    assert [(r["task"], r["variant"], r["workers"]) for r in saved["runs"]] == [
        (t, v, k) for t in ("pos", "nmt") for v, k in (("plain", 1), ("plain-graphed", 1), ("engine", 1),
                                                      ("engine", 2))]
    assert all(r["rate"] > 0 and r["tokens_rate"] > 0 and r["nonfinite"] == 0 for r in saved["runs"])
    assert saved["not_measured"] == []


@pytest.mark.slow
def test_gpu_step_check_quick_cpu_run_checks_equality_dropout_and_fallback_then_times_every_configuration(cpu_check):
    """bench/gpu_step_check.py in its CPU form, as stage a (the checks, --timed-steps 0) and stage d's step-costs
    (--timing-only) run it: it says the capture is skipped, checks both models' graphed step against the eager one
    (POS pulling its rows by the batch's ids), with and without dropout, makes the worker's step in process (the pool
    check: nothing to fail or measure here), runs the fallback child (which trains), gives its verdict, and prints
    each configuration with its ratio to the eager packed step, and its command. (That a run doing both gives the
    verdict first: tests/bench/test_gpu_step_check.py.)"""
    out, done = cpu_check
    summary = (out / "summary.txt").read_text()
    assert "    step-check       ok " in summary and "    step-costs       ok " in summary, summary
    checked = step_output((out / "step-check.log").read_text(), "step-check")
    assert "# capture skipped: no GPU" in checked
    assert "# command: python -m bench.gpu_step_check --device cpu --quick --timed-steps 0" in checked
    checks = re.findall(r"^(equal \w+|dropout \w+|pool|fallback): .*: (OK|FAIL)$", checked, re.M)
    assert checks == [("equal nmt", "OK"), ("equal pos", "OK"), ("dropout nmt", "OK"), ("dropout pos", "OK"),
                      ("pool", "OK"), ("fallback", "OK")]
    assert re.search(r"^equal pos: .*; rows pulled by the batch's ids: 2 tables: OK$", checked, re.M)
    assert "pool: not exercised on the CPU (nothing is captured); the step was made with its static inputs" in checked
    assert "fallback: not exercised on the CPU (nothing is captured); the child trained 6 of 6 batches" in checked
    assert "verdict: OK" in checked.splitlines()
    assert not re.search(r"^\w+ \w+ \w+ \w+ +\d+\.\d\d +\d+\.\d\d$", checked, re.M)  # no timing: --timed-steps 0
    timed = step_output((out / "more.log").read_text(), "step-costs")
    assert "# capture skipped: no GPU" in timed and "verdict" not in timed
    assert "# command: python -m bench.gpu_step_check --device cpu --quick --timing-only" in timed
    rows = re.findall(r"^(\w+ \w+ \w+ \w+) +\d+\.\d\d +(\d+\.\d\d)$", timed, re.M)
    assert [name for name, _ in rows] == [f"{task} {precision} {path}" for task in ("nmt", "pos")
                                          for precision in ("fp32", "bf16")
                                          for path in ("eager packed", "eager padded", "graphed padded")]
    assert [ratio for _, ratio in rows[::3]] == ["1.00"] * 4
