"""bench/bench_optimizers.py: the --quick run trains every optimizer setting through hogwild.train and reports
steady-state updates/s and per-phase milliseconds, with ratios to SGD."""
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_optimizers import VARIANTS

ROOT = Path(__file__).resolve().parents[2]


def _table(stdout: str) -> dict[str, list[float]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in VARIANTS:
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


@pytest.mark.slow
def test_quick_run_measures_every_variant_against_sgd():
    done = subprocess.run([sys.executable, "bench/bench_optimizers.py", "--quick", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _table(done.stdout)
    assert set(rows) == {"sgd", "adam-dense", "adam", "adam-fused"}
    assert rows["sgd"][1] == 1.0
    for name, (per_s, ratio, compute_ms, update_ms) in rows.items():
        assert per_s > 0 and compute_ms > 0 and update_ms > 0, name
        assert ratio == pytest.approx(per_s / rows["sgd"][0], abs=2e-3), name
    assert rows["sgd"][3] < rows["adam"][3]  # plain SGD's step is one add per tensor; Adam's reads two moments
    assert "command: " in done.stdout and "--quick" in done.stdout


@pytest.mark.slow
def test_hogwild_workers_and_independent_copies_are_measured_against_one_worker():
    """sgd-hogwild2 / sgd-replica2(-whole) / sgd-sync2: 2 workers sharing one model; sgd-copies2: 2 separate runs
    at once, their rates summed."""
    variants = "sgd,sgd-hogwild2,sgd-replica2,sgd-replica2-whole,sgd-sync2,sgd-copies2"
    done = subprocess.run([sys.executable, "bench/bench_optimizers.py", "--quick", "--rounds", "1", "--variants",
                           variants], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _table(done.stdout)
    assert set(rows) == set(variants.split(","))
    for name, (per_s, ratio, compute_ms, update_ms) in rows.items():
        assert per_s > 0 and compute_ms > 0 and update_ms > 0, name
        assert ratio == pytest.approx(per_s / rows["sgd"][0], abs=2e-3), name
    assert variants in done.stdout.split("command:")[1]


def test_unknown_variant_is_refused():
    done = subprocess.run([sys.executable, "bench/bench_optimizers.py", "--quick", "--variants", "sgd,lion"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--variants: unknown ['lion']" in done.stderr
