"""bench/bench_latency.py: probes are sorted into levels and runs of a level exactly, a run's records are grouped by
the level of the probes around them, the compiled probe runs beside a command, and misuse is refused."""
import shutil
import sys
import time

import pytest

from bench.bench_latency import by_level, classify, main, parse_probes, segments
from tests.bench.helpers import assert_refused

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler 'cc' to build bench/core_latency.c")


def test_levels_are_multiples_of_the_near_level():
    latencies = [190, 200, 460, 470, 195, 5000, 190, 180, 185, 190]
    near, labels = classify(latencies)
    assert near == 180  # the 10th percentile
    assert labels == ["near", "near", "far", "far", "near", "disturbed", "near", "near", "near", "near"]
    # 270 ns (1.5x) is still near, 1800 (10x) still far
    assert classify([180] * 9 + [270])[1][-1] == "near"
    assert classify([180] * 9 + [271])[1][-1] == "far"
    assert classify([180] * 9 + [1800])[1][-1] == "far"


def test_segments_skip_disturbed_probes():
    labels = ["near", "near", "far", "disturbed", "far", "near"]
    assert segments([0, 1, 2, 3, 4, 5], labels) == [("near", 0, 1), ("far", 2, 4), ("near", 5, 5)]
    assert segments([], []) == []


def test_records_take_the_level_of_the_probes_around_them():
    probes = [(10.0, 190), (10.5, 200), (11.0, 460), (11.5, 470), (12.0, 9000), (12.5, 195)]
    labels = classify([ns for _, ns in probes])[1]

    def record(time, updates=5000, kind="train"):
        return {"kind": kind, "time": time, "updates": updates, "phase_ms": {"update": 0.4, "compute": 7.0},
                "updates_per_s": 240.0}

    records = [record(10.2), record(10.75), record(11.3), record(12.1), record(12.3), record(20.0),
               record(10.1, updates=100), record(10.1, kind="eval"), {"kind": "train", "time": 10.2, "updates": 5000}]
    grouped = by_level(probes, labels, records, within=0.3, skip_updates=2000)
    # 10.2: 10.0 and 10.5 near; 10.75: 10.5 near and 11.0 far -> mixed, left out; 11.3: 11.5 far;
    # 12.1: only the disturbed 12.0 -> left out; 12.3: 12.5 near (12.0 disturbed is ignored); 20.0: no probe;
    # the early and the eval records, and one without phase times, are left out
    assert [r["time"] for r in grouped["near"]] == [10.2, 12.3]
    assert [r["time"] for r in grouped["far"]] == [11.3]


def test_probe_lines_are_parsed():
    assert parse_probes("1795672809.008 190.5 150.0\n1795672809.508 460.0 440.1\n\n") == [
        (1795672809.008, 190.5), (1795672809.508, 460.0)]


@needs_cc
def test_the_probe_runs_beside_a_command_and_reads_its_metrics(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    writer = (f"import json, time\nwith open({str(metrics)!r}, 'w') as f:\n"
              "    for i in range(6):\n"
              "        time.sleep(0.2)\n"
              "        f.write(json.dumps({'kind': 'train', 'time': time.time(), 'updates': 3000 + i, "
              "'phase_ms': {'update': 0.5, 'compute': 7.5}, 'updates_per_s': 100.0}) + '\\n')\n"
              "    f.write(json.dumps({'kind': 'train', 'time': time.time() - 1000, 'updates': 4000, "
              "'phase_ms': {'update': 9.0, 'compute': 9.0}, 'updates_per_s': 1.0}) + '\\n')\n")
    result = main(["--period", "0.1", "--rounds", "200", "--metrics", str(metrics), "--", sys.executable, "-c",
                   writer])
    assert 2 <= result["probes"] <= 20  # ~1.2 s of the command at one probe per 0.1 s (fewer on a busy machine)
    assert result["near_ns"] > 0 and result["near"]["probes"] >= 1
    grouped = result["run"]
    counted = sum(level["records"] for level in grouped.values())
    assert 1 <= counted <= 6  # the record stamped 1000 s back has no probe around it
    assert all(level["update"] == 0.5 and level["compute"] == 7.5 for level in grouped.values())
    out = capsys.readouterr().out
    assert "level changes:" in out and "command: python -m bench.bench_latency --period 0.1" in out


@needs_cc
def test_a_probe_alone_lasts_its_seconds_and_its_lines_are_saved(tmp_path):
    began, saved = time.monotonic(), tmp_path / "probes.txt"
    result = main(["--seconds", "0.6", "--period", "0.1", "--rounds", "200", "--save", str(saved)])
    assert 2 <= result["probes"] <= 7
    assert "run" not in result
    assert time.monotonic() - began < 30
    lines = [line.split() for line in saved.read_text().splitlines()]
    assert len(lines) == result["probes"] and all(len(fields) == 4 for fields in lines)
    monotonic = [float(fields[3]) for fields in lines]  # the clock of time.perf_counter()
    assert began - 1 <= monotonic[0] <= monotonic[-1] <= time.perf_counter()
    assert all(float(fields[2]) <= float(fields[1]) for fields in lines)  # the fastest burst <= the median


@needs_cc
def test_a_failing_command_is_reported_with_its_exit_code_and_the_probes_are_saved(tmp_path):
    saved = tmp_path / "probes.txt"
    with pytest.raises(SystemExit, match=r"the command exited with 3: .*sys.exit\(3\)"):
        main(["--period", "0.1", "--save", str(saved), "--", sys.executable, "-c",
              "import sys, time; time.sleep(0.5); sys.exit(3)"])
    assert len(saved.read_text().splitlines()) >= 1
    with pytest.raises(SystemExit, match="cannot run the command /nonexistent/prog"):
        main(["--period", "0.1", "--", "/nonexistent/prog"])


def test_a_missing_compiler_is_named():
    with pytest.raises(SystemExit, match="no C compiler '/nonexistent/cc'"):
        main(["--seconds", "1", "--cc", "/nonexistent/cc"])


@pytest.mark.parametrize("argv, message", [
    (["--period", "0"], "--period must be positive"),
    (["--rounds", "-1"], "--rounds must be positive"),
    (["--cpus", "0"], "--cpus must be two different CPU numbers A,B, got '0'"),
    (["--cpus", "1,1"], "--cpus must be two different CPU numbers"),
    (["--metrics", "m.jsonl"], "--metrics needs the command that writes it, after --"),
])
def test_bad_options_are_refused(argv, message, capsys):
    assert_refused(main, argv, message, capsys)


@needs_cc
def test_unreadable_metrics_are_named(tmp_path):
    bad = tmp_path / "metrics.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(SystemExit, match=f"cannot read --metrics {bad}"):
        main(["--period", "0.1", "--metrics", str(bad), "--", sys.executable, "-c", "pass"])
