"""bench/gpu_step_check.py in its CPU form: it says the capture is skipped, checks both models' graphed step against
the eager one (and passes), and prints each configuration with its ratio to the eager packed step, and its command."""
import re


def test_quick_cpu_run_checks_equality_and_prints_every_configuration(run_bench):
    done = run_bench("gpu_step_check", "--device", "cpu", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "# capture skipped: no GPU" in done.stdout
    assert re.findall(r"^equal (\w+): .*: (OK|FAIL)$", done.stdout, re.M) == [("nmt", "OK"), ("pos", "OK")]
    rows = re.findall(r"^(\w+ \w+ \w+ \w+) +\d+\.\d\d +(\d+\.\d\d)$", done.stdout, re.M)
    assert [name for name, _ in rows] == [f"{task} {precision} {path}" for task in ("nmt", "pos")
                                          for precision in ("fp32", "bf16")
                                          for path in ("eager packed", "eager padded", "graphed padded")]
    assert [ratio for _, ratio in rows[::3]] == ["1.00"] * 4
    assert "# command: python -m bench.gpu_step_check --device cpu --quick" in done.stdout
