"""What the bench tests share: running a benchmark as a user does, `python -m bench.NAME ARGS`, from the root."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def run_bench():
    """`run_bench("bench_engine", "--quick")` -> the finished subprocess (stdout and stderr as text)."""

    def run(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)

    return run
