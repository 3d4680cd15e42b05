"""bench/bench_distributed.py: the --quick run trains single-host Hogwild and all-reduce over mpiexec and prints its
command and each variant's ratios to single."""
import re

import pytest

from bench import bench_distributed
from tests.bench.usage_errors import assert_refused
from tests.mpi import mpi_missing


@pytest.mark.slow
@pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))
def test_quick_run_prints_the_ratios_to_single_and_its_command(run_bench):
    done = run_bench("bench_distributed", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("command: python -m bench.bench_distributed --quick\n")
    assert re.search(r"^single +\d+ +1\.00 ", done.stdout, re.M)
    match = re.search(r"^allreduce +\d+ +(\d+\.\d\d) +\d+\.\d{4} .* +(\d+)$", done.stdout, re.M)
    assert match and float(match[1]) > 0 and int(match[2]) > 0  # its ratio to single, and host 0 exchanged


def test_unknown_variant_and_a_race_without_single_are_refused(capsys):
    assert_refused(bench_distributed.main, ["--variants", "single,gossip"], "--variants: unknown ['gossip']", capsys)
    assert_refused(bench_distributed.main, ["--variants", "allreduce"], "'single' is the reference", capsys)
