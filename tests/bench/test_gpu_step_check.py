"""bench/gpu_step_check.py in its CPU form: it says the capture is skipped, checks both models' graphed step against
the eager one (POS pulling its rows by the batch's ids), with and without dropout, makes the worker's step in process
(the pool check: nothing to fail or measure here), runs the fallback child (which trains, beside the other checks),
gives its verdict before the timing, and prints each configuration with its ratio to the eager packed step, and its
command; the dropout check fails on a model whose replays draw the same masks."""
import re

import torch

from bench import gpu_step_check as S


def test_quick_cpu_run_checks_equality_dropout_and_fallback_then_times_every_configuration(run_bench):
    done = run_bench("gpu_step_check", "--device", "cpu", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "# capture skipped: no GPU" in done.stdout
    checks = re.findall(r"^(equal \w+|dropout \w+|pool|fallback): .*: (OK|FAIL)$", done.stdout, re.M)
    assert checks == [("equal nmt", "OK"), ("equal pos", "OK"), ("dropout nmt", "OK"), ("dropout pos", "OK"),
                      ("pool", "OK"), ("fallback", "OK")]
    assert re.search(r"^equal pos: .*; rows pulled by the batch's ids: 2 tables: OK$", done.stdout, re.M)
    assert "pool: not exercised on the CPU (nothing is captured); the step was made with its static inputs" \
        in done.stdout
    assert "fallback: not exercised on the CPU (nothing is captured); the child trained 6 of 6 batches" in done.stdout
    lines = done.stdout.splitlines()
    verdict = lines.index("verdict: OK")
    rows = re.findall(r"^(\w+ \w+ \w+ \w+) +\d+\.\d\d +(\d+\.\d\d)$", done.stdout, re.M)
    assert [name for name, _ in rows] == [f"{task} {precision} {path}" for task in ("nmt", "pos")
                                          for precision in ("fp32", "bf16")
                                          for path in ("eager packed", "eager padded", "graphed padded")]
    assert lines.index(next(line for line in lines if line.startswith("nmt fp32 eager packed"))) > verdict
    assert [ratio for _, ratio in rows[::3]] == ["1.00"] * 4
    assert "# command: python -m bench.gpu_step_check --device cpu --quick" in done.stdout


def test_the_dropout_check_fails_when_two_seeds_give_the_same_masks(capsys):
    batches, threads = S.task_batches(2, 500)["pos"], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert S.dropout_pair("pos", S.models("small", 500, S.DROPOUT)["pos"], batches, torch.device("cpu"), 1e-4)
        assert not S.dropout_pair("pos", S.models("small", 500, 0.0)["pos"], batches, torch.device("cpu"), 1e-4)
    finally:
        torch.set_num_threads(threads)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("dropout pos: ") and last.endswith(": FAIL (the same masks twice)")
