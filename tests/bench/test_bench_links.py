"""bench/bench_links.py: the --quick run trains over unlimited and 100 Mbit/s simulated links and prints its command
and a row per rate, the unlimited one the reference (ratio 1.00); bad arguments are refused."""
import re

import pytest

from bench import bench_links
from hogwild.multihost.simulated_hosts import unavailable
from tests.bench.usage_errors import assert_refused
from tests.mpi import mpi_missing


@pytest.mark.slow
@pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_quick_run_prints_a_row_per_rate_and_its_command(run_bench):
    done = run_bench("bench_links", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith("command: python -m bench.bench_links --quick\n")
    assert re.search(r"^pos +easgd +unlimited +[\d.]+ +1\.00 .* +0$", done.stdout, re.M), done.stdout
    slow = re.search(r"^pos +easgd +100mbit +[\d.]+ +([\d.]+) +([\d.]+) +[\d.]+ +(\d+)% .* +0$", done.stdout, re.M)
    assert slow and float(slow[1]) > 0 and float(slow[2]) > 0 and int(slow[3]) > 0, done.stdout


def test_bad_arguments_are_refused(capsys):
    assert_refused(bench_links.main, ["--models", "gpt"], "--models: pos, nmt", capsys)
    assert_refused(bench_links.main, ["--rates", "20mbit,unlimited"], "the first must be 'unlimited'", capsys)
    assert_refused(bench_links.main, ["--rates", "unlimited,fast"], "--rates: link rate 'fast'", capsys)
