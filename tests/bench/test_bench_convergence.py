"""bench/bench_convergence.py: the --quick run, as CI runs it, reaches its target through hogwild.train's
Config.target and through the mnist_hogwild pattern, and reports times, updates and ratios."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_reaches_the_target_with_the_engine_and_the_torch_pattern(tmp_path):
    out = tmp_path / "curves.json"
    done = subprocess.run([sys.executable, "bench/bench_convergence.py", "--quick", "--variants", "single,torch2",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["task"] == "pos" and result["target"] == 0.3 and set(result["runs"]) == {"single", "torch2"}
    for name, run in result["runs"].items():
        assert run["best"] >= 0.3, name  # stopped at the target, not at the time limit
        points = run["evaluations"]
        assert [p["metric"] >= 0.3 for p in points].count(True) >= 1
        assert all(a["seconds"] <= b["seconds"] and a["updates"] <= b["updates"] for a, b in zip(points, points[1:]))
        assert run["minutes"] * 60 == pytest.approx(next(p["seconds"] for p in points if p["metric"] >= 0.3))
        assert run["updates"] >= 25  # evaluations every 25 updates
    assert result["runs"]["single"]["ratio_to_single"] == 1.0
    assert "| single |" in done.stdout and "| torch2 |" in done.stdout
    assert "command: " in done.stdout and "--quick" in done.stdout


def test_unknown_variant_is_refused():
    done = subprocess.run([sys.executable, "bench/bench_convergence.py", "--quick", "--variants", "single,async9"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--variants: unknown ['async9']" in done.stderr
