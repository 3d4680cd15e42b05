"""bench/interleave.py through bench_convergence --interleave: runs train in turns (the others' process groups
stopped), a run's times are its active time, and a run that fails stops the race with its message, the others'
runs kept."""
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import bench_convergence, interleave
from bench.curves import Curve
from bench.interleave import active_seconds, race

ROOT = Path(__file__).resolve().parents[2]


def _bench(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/bench_convergence.py", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_active_seconds_count_only_the_runs_turns():
    turns = [(10.0, 12.0), (14.0, 16.5), (20.0, 21.0)]
    assert active_seconds(turns, 10.0, 10.0) == 0.0
    assert active_seconds(turns, 10.0, 13.0) == 2.0  # the gap after the first turn is another run's
    assert active_seconds(turns, 10.5, 15.0) == 2.5
    assert active_seconds(turns, 10.0, 30.0) == 5.5
    assert active_seconds(turns, 17.0, 19.0) == 0.0


# A worker of the stand-in run: notes its pid, then the time every 5 ms, until killed. It is in the run's process
# group, as the engine's workers are, so it must be stopped in the other runs' turns and gone after a failed race.
_WORKER = """
import os, sys, time
with open(sys.argv[1], "w") as out:
    print(os.getpid(), file=out, flush=True)
    while True:
        print(time.perf_counter(), file=out, flush=True)
        time.sleep(0.005)
"""


def _train(args: dict, variant: str):
    """A stand-in run for interleave.child: set up, then 'train' (start a worker; note the time every 5 ms) until
    asked to stop, or exit with status 3 after 0.3 s, its worker left running, when it is args['crash']."""
    yield
    log = os.path.join(args["dir"], variant)
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, log])
    ticks = []
    while not interleave.stop_requested:
        ticks.append(time.perf_counter())
        if variant == args["crash"] and len(ticks) > 60:
            os._exit(3)
        time.sleep(0.005)
    worker.kill()
    worker.wait()
    yield ticks, _worker_ticks(log)[1]


def _worker_ticks(log: str) -> tuple[int, list[float]]:
    """The stand-in worker's pid and its ticks."""
    with open(log) as file:
        pid, *ticks = file.read().split()
    return int(pid), [float(t) for t in ticks]


def _finish(args: dict, variant: str, ticks: tuple[list[float], list[float]]) -> tuple[list[float], list[float]]:
    return ticks


def _in_turns(t: float, turns: list[tuple[float, float]], slack: float = 0.01) -> bool:
    return any(begin <= t <= end + slack for begin, end in turns)


def test_race_gives_each_run_its_minutes_in_turns_and_stops_its_whole_group_between(tmp_path):
    results, turns = race({"a": 0.01, "b": 0.005}, 0.2, interleave.child,
                          (_train, _finish, {"crash": None, "dir": str(tmp_path)}))
    assert set(results) == set(turns) == {"a", "b"}
    for variant, seconds in (("a", 0.6), ("b", 0.3)):
        *training, stopping = turns[variant]
        assert sum(end - begin for begin, end in training) == pytest.approx(seconds, abs=0.05)
        assert len(training) == math.ceil(round(seconds / 0.2, 6))  # 0.2-s turns, the last one shorter
        own, worker = results[variant]
        assert len(own) > 20 and len(worker) > 5
        # the run and its worker ran only in the run's own turns (a last tick may fall just after one ends)
        assert all(_in_turns(t, turns[variant]) for t in own + worker)
        other = turns["b" if variant == "a" else "a"]
        assert not [t for t in worker if _in_turns(t, other, slack=-0.01)]  # nothing in the other run's turns
    assert [v for _, _, v in sorted((b, e, v) for v, spans in turns.items() for b, e in spans)][:4] == ["a", "b"] * 2


def test_a_run_that_dies_in_its_turn_stops_the_race_and_every_process_of_the_other_run_and_its_own(tmp_path):
    with pytest.raises(interleave.RunFailed, match=r"^b: the run exited \(code 3\) during its turn$") as failed:
        race({"a": 0.05, "b": 0.05}, 0.5, interleave.child, (_train, _finish, {"crash": "b", "dir": str(tmp_path)}))
    assert not [child for child in multiprocessing.active_children() if child.name.startswith("race-")]
    # a had one turn of its 3 s before b died in its first: a was stopped as at its minutes' end and finished
    failure = failed.value
    assert failure.variant == "b" and set(failure.results) == {"a"} and set(failure.slices) == {"a", "b"}
    (first_turn, stopping), own = failure.slices["a"], failure.results["a"][0]
    assert first_turn[1] - first_turn[0] == pytest.approx(0.5, abs=0.05)
    assert len(own) > 20 and all(_in_turns(t, [first_turn, stopping]) for t in own)
    for variant in ("a", "b"):  # b's orphaned worker too: it was in b's group
        pid, _ = _worker_ticks(str(tmp_path / variant))
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), variant


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped by its new parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_interleaved_runs_train_only_in_their_own_turns(tmp_path):
    out = tmp_path / "race.json"
    done = _bench("--quick", "--interleave", "1.5", "--variants", "single,hogwild2", "--minutes", "0.1",
                  "--levels", "0.99", "--eval-updates", "10", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    turns = result["interleave"]["turns"]
    assert result["interleave"]["slice_seconds"] == 1.5 and set(turns) == {"single", "hogwild2"}
    for variant, spans in turns.items():  # 6 s each, in turns of at most 1.5 s, then a turn to stop in
        *training, stopping = spans
        assert sum(end - begin for begin, end in training) == pytest.approx(6.0, abs=0.05), variant
        assert all(end - begin <= 1.5 + 0.05 for begin, end in training), variant
        assert stopping[1] - stopping[0] < 3.0, variant
    ordered = sorted((begin, end, variant) for variant, spans in turns.items() for begin, end in spans)
    assert all(b[0] >= a[1] for a, b in zip(ordered, ordered[1:]))  # never two runs at once
    assert [v for _, _, v in ordered[:4]] == ["single", "hogwild2"] * 2  # in turns, in --variants order
    for variant, run in result["runs"].items():
        points = run["evaluations"]
        assert len(points) >= 5, variant  # a snapshot every 10 updates, all scored (--levels 0.99 is not reached)
        for point in points:  # taken while the run had the machine
            assert any(begin - 0.02 <= point["clock"] <= end + 0.05 for begin, end in turns[variant]), (variant, point)
        assert all(a["updates"] < b["updates"] for a, b in zip(points, points[1:]))
        assert points[-1]["seconds"] <= sum(end - begin for begin, end in turns[variant]) + 0.05
    assert "| single |" in done.stdout and "| hogwild2 |" in done.stdout and "(time_limit)" in done.stdout


def test_a_run_that_fails_stops_the_race_with_its_message():
    done = _bench("--train", "/nonexistent/brown", "--interleave", "1", "--variants", "single,hogwild2",
                  "--minutes", "0.1", timeout=120)
    assert done.returncode == 1
    assert "bench_convergence --interleave: single: the run failed: hogwild.tasks.options.OptionError: --train: " \
           "/nonexistent/brown does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failed_race_keeps_the_other_runs_evaluations_in_the_json(tmp_path, monkeypatch):
    def failing_race(minutes, slice_seconds, target, target_args):
        assert set(minutes) == {"single", "hogwild2"} and slice_seconds == 1.0
        failure = interleave.RunFailed("hogwild2", "the run exited (code 9) during its turn")
        single = Curve("single", "accuracy", [{"seconds": 1.0, "updates": 10, "metric": 0.5}],
                       f"signal {interleave.STOP_SIGNAL.name}", started=100.0)
        failure.results = {"single": single}
        failure.slices = {"single": [(100.0, 100.5), (101.0, 102.0)], "hogwild2": [(100.5, 101.0)]}
        raise failure

    monkeypatch.setattr(interleave, "race", failing_race)
    out = tmp_path / "race.json"
    with pytest.raises(SystemExit) as exit_info:
        bench_convergence.main(["--quick", "--scoring", "offline", "--interleave", "1", "--variants",
                                "single,hogwild2", "--minutes", "0.1", "--json", str(out)])
    assert str(exit_info.value) == ("bench_convergence --interleave: hogwild2: the run exited (code 9) during its "
                                    f"turn; the other runs' evaluations up to then: single, in {out}")
    result = json.loads(out.read_text())
    # the snapshot at 1.0 s of wall clock came after 0.5 s of single's own turns (hogwild2 had the machine between)
    assert result["runs"] == {"single": {"stop_reason": "stopped: hogwild2 failed", "evaluations": [
        {"seconds": 0.5, "updates": 10, "metric": 0.5, "clock": 101.0}]}}
    assert result["interleave"]["turns"]["hogwild2"] == [[100.5, 101.0]]


@pytest.mark.parametrize("argv, message", [
    (["--interleave", "0"], "--interleave must be a positive number of seconds, got 0"),
    (["--interleave", "nan"], "--interleave must be a positive number of seconds, got nan"),
    (["--interleave", "5", "--scoring", "online"], "--interleave needs --scoring offline"),
    (["--interleave", "5", "--task", "nmt"], "--interleave needs a number for --target"),
])
def test_bad_interleave_options_are_refused(argv, message):
    done = _bench("--variants", "single,hogwild2", *argv, timeout=120)
    assert done.returncode == 2 and message in done.stderr
