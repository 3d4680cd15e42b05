"""bench/bench_machine.py: two processes really take turns on one shared buffer, the windows cover the run, and
bad options are refused."""
import pytest

from bench.bench_machine import main
from tests.bench.helpers import assert_refused


def test_two_processes_take_turns_on_one_shared_buffer(capsys):
    result = main(["--seconds", "1", "--window", "0.25", "--megabytes", "0.5"])
    sweeps, buffer = result["sweeps"], result["buffer"]
    assert abs(sweeps[0] - sweeps[1]) <= 1  # strictly alternating
    assert sweeps[0] > 10
    # every sweep of either process added 1 to every element of the same memory: none lost, none doubled
    # (+1: process 0's first sweep, made before process 1 was up, is not timed)
    assert buffer.numel() == 2**17
    assert bool((buffer == sweeps[0] + sweeps[1] + 1).all())
    assert len(result["windows_ms"]) == 4 and all(ms > 0 for ms in result["windows_ms"])
    assert result["alone_ms"] > 0
    out = capsys.readouterr().out
    assert "command: python -m bench.bench_machine --seconds 1 --window 0.25 --megabytes 0.5" in out


@pytest.mark.parametrize("argv, message", [
    (["--seconds", "0"], "--seconds must be positive"),
    (["--seconds", "1", "--window", "2"], "--window (2) must not exceed --seconds (1)"),
    (["--megabytes", "-1"], "--megabytes must be positive"),
])
def test_bad_options_are_refused(argv, message, capsys):
    assert_refused(main, argv, message, capsys)


def test_one_window_as_long_as_the_run_is_reported(capsys):
    result = main(["--seconds", "0.5", "--window", "0.5", "--megabytes", "0.5"])
    assert len(result["windows_ms"]) == 1 and result["windows_ms"][0] > 0
