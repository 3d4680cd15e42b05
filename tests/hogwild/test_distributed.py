"""Multi-host training under a real `mpiexec -n 2..4` on localhost (hogwild.distributed and its agents/servers).

Each test launches a tiny script from tests/hogwild/mpi_scripts/ and asserts on its output; the scripts themselves
assert the closed forms on every rank (a failed assertion aborts the whole MPI job, so rc != 0).
"""
from __future__ import annotations

import json
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


def train_tiny(tmp_path: pathlib.Path, ranks: int, algorithm: str, *args: str, timeout: float = 120.0) -> dict:
    """Run train_tiny.py (under mpiexec unless algorithm == 'single'); {rank: its result dict}."""
    out = tmp_path / f"out-{algorithm}-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    script_args = [algorithm, "--out", str(out), *args]
    if algorithm == "single":
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, str(SCRIPTS / "train_tiny.py"), *script_args], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    else:
        done = mpirun(ranks, "train_tiny.py", *script_args, timeout=timeout)
    assert done.returncode == 0, done.stdout
    results = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert sorted(results) == list(range(ranks)), done.stdout
    return results


@pytest.fixture(scope="module")
def single_host_loss(tmp_path_factory) -> float:
    """Single-host Hogwild with 2 workers (the same total number of workers as the 2-host runs), 4 epochs."""
    return train_tiny(tmp_path_factory.mktemp("single"), 1, "single", "--epochs", "4", "--workers", "2")[0]["loss"]


@pytest.mark.parametrize("algorithm, ranks, extra", [
    ("allreduce", 2, []),
    ("adpsgd", 3, []),  # an odd ring: hosts 0 and 2 both mix with host 1
    ("easgd", 3, ["--servers", "1"]),
    ("eamsgd", 3, ["--servers", "1"]),  # the local optimizer is Nesterov momentum
    ("downpour", 4, ["--servers", "2", "--tester"]),  # central model in 2 partitions, plus a tester rank
])
def test_each_algorithm_trains_to_about_the_single_host_loss(tmp_path, single_host_loss, algorithm, ranks, extra):
    results = train_tiny(tmp_path, ranks, algorithm, "--epochs", "4", *extra)
    hosts = [r for r in results.values() if r["role"] == "worker"]
    initial = 0.8245  # full-data loss of the seeded starting model (tiny_task.make_task(seed=0))
    losses = {r["loss"] for r in results.values()}
    assert max(losses) - min(losses) < 1e-6, results  # every rank ends with the same final model
    loss = results[0]["loss"]
    assert loss < 0.1 * initial and loss < 2.0 * single_host_loss + 0.01, (loss, single_host_loss)
    assert all(h["exchanges"] >= 1 for h in hosts), results
    assert sum(h["updates"] for h in hosts) == 4 * 64  # 4 epochs over 64 batches, sharded between the hosts
    if "--tester" in extra:
        tester = results[ranks - 1]
        assert tester["role"] == "tester" and tester["tests"] >= 1
        assert abs(tester["final_metrics"]["loss"] - loss) < 1e-6
