"""Multi-host training under a real `mpiexec -n 2..4` on localhost (hogwild.distributed and its agents/servers).

Each test launches a tiny script from tests/hogwild/mpi_scripts/ and asserts on its output; the scripts themselves
assert the closed forms on every rank (a failed assertion aborts the whole MPI job, so rc != 0).
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = pathlib.Path(__file__).resolve().parent / "mpi_scripts"
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"


def _mpi_missing() -> str | None:
    if not MPIEXEC.exists():
        return f"MPI is not installed: no {MPIEXEC} (pip install '.[mpi]')"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install '.[mpi]')"
    return None


pytestmark = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


def mpirun(n: int, script: str, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    """Run `mpiexec -n n python script args` from the repo root; stdout and stderr together in .stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [str(MPIEXEC), "-n", str(n), sys.executable, str(SCRIPTS / script), *args]
    return subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("algorithm, ranks", [
    ("allreduce", 3),  # averaging equals the mean across ranks
    ("adpsgd", 2),  # one mixing: both hosts hold the pair's mean
    ("adpsgd", 4),  # mixing keeps the sum (average) of all hosts' parameters; the closing average is the mean
    ("easgd", 3),  # 2 servers (partitioned center) + 1 host: x - a(x - c) and c + a(x - c)
    ("downpour", 3),  # 1 server + 2 hosts: center = start + sum of the pushed updates
])
def test_one_exchange_matches_its_closed_form(algorithm, ranks):
    done = mpirun(ranks, "exchange_checks.py", algorithm)
    assert done.returncode == 0, done.stdout
    for rank in range(ranks):
        assert f"CHECKED {algorithm} rank {rank}" in done.stdout, done.stdout
