"""The reproduction scripts on tiny corpora: each writes its table (Markdown + CSV, with the command), its figure
and the run directories; --reuse re-reads finished runs instead of training again. They run as the README shows
(`python -m scripts.NAME` from the repository root) and, with the project importable, as files."""
import csv
import importlib
import json
import os
import subprocess
import sys

import pytest

from tests.tasks.helpers import REPO

pytestmark = pytest.mark.slow
SCRIPTS = ("reproduce_pos", "reproduce_nmt", "compare_optimizers", "train_serial")


def _script(name):
    return importlib.import_module(f"scripts.{name}")


@pytest.mark.parametrize("name", SCRIPTS)
def test_runs_as_a_module_and_as_a_file(name):
    """`python -m scripts.NAME` from the checkout; `python scripts/NAME.py` when hogwild is importable (installed;
    here PYTHONPATH stands in for the install). Neither edits sys.path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    as_module = subprocess.run([sys.executable, "-m", f"scripts.{name}", "--help"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=120)
    assert as_module.returncode == 0 and "usage:" in as_module.stdout, as_module.stderr[-2000:]
    as_file = subprocess.run([sys.executable, f"scripts/{name}.py", "--help"], cwd=REPO,
                             env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert as_file.returncode == 0 and as_file.stdout == as_module.stdout, as_file.stderr[-2000:]
    source = (REPO / "scripts" / f"{name}.py").read_text()
    assert "sys.path.insert" not in source and "sys.path.append" not in source


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOGWILD_CACHE", str(tmp_path / "cache"))


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def test_reproduce_pos_figure1(tiny_pos, tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    argv = ["--train", str(tiny_pos["train"]), "--dev", str(tiny_pos["dev"]), "--format", "slash", "--epochs", "1",
            "--time-limit", "20", "--eval-every-seconds", "5", "--out", str(out), "--runs-dir", str(runs)]
    assert _script("reproduce_pos").main(argv) == 0
    rows = _rows(out / "pos_figure1.csv")
    assert [(r["run"], r["workers"], r["optimizer"], r["updates"]) for r in rows] == [
        ("SGD, 1 worker", "1", "sgd", "150"), ("SGD, 2 workers", "2", "sgd", "150"), ("Adam, 1 worker", "1", "adam",
                                                                                      "150")]
    assert all(0.0 <= float(r["best held-out accuracy"]) <= 1.0 for r in rows)
    assert (out / "pos_figure1.png").read_bytes()[:4] == b"\x89PNG"
    assert "Command: `python -m scripts.reproduce_pos --train" in (out / "pos_figure1.md").read_text()
    assert json.loads((runs / "sgd-2" / "summary.json").read_text())["workers"] == 2
    before = (runs / "adam-1" / "summary.json").stat().st_mtime
    assert _script("reproduce_pos").main(argv + ["--reuse"]) == 0  # reads the runs back, trains nothing
    assert (runs / "adam-1" / "summary.json").stat().st_mtime == before


def test_reproduce_nmt_table1(tiny_nmt, tmp_path):
    out = tmp_path / "results"
    assert _script("reproduce_nmt").main([
        "--train", str(tiny_nmt["train"]), "--dev", str(tiny_nmt["dev"]), "--updates", "6", "--batch-size", "16",
        "--eval-every", "3", "--beam", "2", "--vocab-size", "100", "--out", str(out),
        "--runs-dir", str(tmp_path / "runs")]) == 0
    rows = _rows(out / "nmt_table1.csv")
    assert [r["workers"] for r in rows] == ["1", "2"] and rows[0]["speedup"] == "1.0"
    assert all(int(r["updates"]) >= 6 for r in rows)
    assert [r["paper hours"] for r in rows] == ["26.89", "16.56"]
    assert (out / "nmt_figure2.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_optimizers(tiny_pos, tmp_path):
    out = tmp_path / "results"
    assert _script("compare_optimizers").main([
        "--train", str(tiny_pos["train"]), "--dev", str(tiny_pos["dev"]), "--optimizers", "adam",
        "--time-limit", "4", "--eval-every-seconds", "2", "--target", "0.3", "--out", str(out),
        "--runs-dir", str(tmp_path / "runs")]) == 0
    rows = _rows(out / "compare_optimizers.csv")
    assert [(r["run"], r["mode"], r["workers"]) for r in rows] == [
        ("adam, 1 worker", "single", "1"), ("adam, 2 workers hogwild", "hogwild", "2"),
        ("sgd, 2 workers sync", "sync", "2")]
    assert "seconds to accuracy 0.3" in rows[0]
    assert (out / "compare_optimizers.png").read_bytes()[:4] == b"\x89PNG"


def test_scripts_reject_bad_flags(capsys):
    with pytest.raises(SystemExit):
        _script("compare_optimizers").main(["--workers", "1"])
    assert "--workers must be >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _script("compare_optimizers").main(["--lr", "sgd:0.1"])
    assert "--lr takes OPT=LR pairs" in capsys.readouterr().err
