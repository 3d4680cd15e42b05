"""bench/bench_start.py: the --quick run measures both start methods (each process trains twice) and prints its
ratios and command; the table's arithmetic on hand-made measurements."""
import re

import pytest

from bench import bench_start
from tests.bench.usage_errors import assert_refused


@pytest.mark.slow
def test_quick_run_prints_both_methods_the_ratios_and_its_command(run_bench):
    done = run_bench("bench_start", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    number = r"\d+\.\d\d"
    assert re.search(rf"^      2 spawn      +{number} +{number} +{number}$", done.stdout, re.M), done.stdout
    assert re.search(rf"^      2 forkserver +{number} +{number} +{number}   {number}x {number}x {number}x$",
                     done.stdout, re.M), done.stdout
    assert done.stdout.rstrip().endswith("command: python -m bench.bench_start --quick")


def test_the_table_gives_medians_and_their_ratios_to_spawn():
    runs = {(2, "spawn"): [{"first": 4.0, "second": 4.0, "process": 12.0}, {"first": 2.0, "second": 3.0,
                                                                           "process": 10.0},
                           {"first": 3.0, "second": 5.0, "process": 11.0}],
            (2, "forkserver"): [{"first": 3.0, "second": 0.25, "process": 5.5}] * 3}
    assert bench_start.table(runs).splitlines()[1:] == [
        "      2 spawn          3.00     4.00     11.00",
        "      2 forkserver     3.00     0.25      5.50   1.00x 0.06x 0.50x"]


def test_no_workers_or_rounds_is_refused(capsys):
    assert_refused(bench_start.main, ["--counts", "0"], "--counts and --rounds must be >= 1", capsys)
