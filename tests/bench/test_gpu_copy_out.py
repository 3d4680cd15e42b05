"""bench/gpu_copy_out.py: the --quick run times the copy-out of both modes and the update, prints the bytes each copy
moves (the step's rows fewer than the tables' capacity), their ratio and its command; bad values are refused."""
import re

from bench import gpu_copy_out
from tests.bench.usage_errors import assert_refused


def test_quick_run_prints_both_copies_their_ratio_the_update_and_the_command(run_bench):
    done = run_bench("gpu_copy_out", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    sizes = {mode: float(mb) for mode, mb in re.findall(
        r"^  copy-out, (capacity|rows) +(\d+\.\d\d) MB/step +\d+\.\d\d ms on the CPU +\d+\.\d\d ms at 52 GB/s "
        r"\(estimate\)$", done.stdout, re.M)}
    assert set(sizes) == {"capacity", "rows"} and sizes["rows"] < sizes["capacity"], done.stdout
    assert re.search(r"^  copy-out rows / capacity: bytes x0\.\d{3}, CPU time x\d+\.\d{3}$", done.stdout, re.M)
    assert re.search(r"^  update \(read the slot, shared SGD step\) +\d+\.\d\d ms on the CPU$", done.stdout, re.M)
    assert "sparse tables (10000, 128) of capacity 3961, (100, 32) of capacity 100" in done.stdout  # Brown's longest
    assert "command: python -m bench.gpu_copy_out --quick" in done.stdout


def test_bad_values_are_refused(capsys):
    for argv in (["--rounds", "0"], ["--bandwidth", "0"]):
        assert_refused(gpu_copy_out.main, argv, "--steps and --rounds must be >= 1, --bandwidth > 0", capsys)
