"""scripts/train_serial.py, run as its docstring shows, on the synthetic tasks (seconds): run folder contents, update
limits, both loops (plain and the hogwild engine in single mode)."""
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "train_serial.py"


def run(*args, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, json.loads((out / "results.json").read_text())


def test_pos_plain_loop_run_folder(tmp_path):
    out, results = run("--task", "pos", "--synthetic", "--loop", "plain", "--max-updates", "30", "--log-every", "10",
                       "--lr", "0.01", tmp_path=tmp_path)
    assert results["updates"] == 30 and results["loop"] == "plain"
    assert 0.0 <= results["unk_accuracy"] <= 1.0 and results["accuracy"] > 0.5
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "train_loss" in r] == [10, 20, 30]
    assert json.loads((out / "config.json").read_text())["max_updates"] == 30
    assert "--synthetic" in (out / "command.txt").read_text()


@pytest.mark.slow
def test_nmt_engine_loop_writes_translations(tmp_path):
    out, results = run("--task", "nmt", "--synthetic", "--loop", "engine", "--max-updates", "5", "--beam", "2",
                       tmp_path=tmp_path)
    assert results["updates"] == 5 and results["loop"] == "engine" and results["stop_reason"] == "max_steps"
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    for name in ("greedy", "beam2"):
        assert len((out / f"test.{name}.hyp").read_text().splitlines()) == results["test_counts"]["kept"] == 200


def test_bad_arguments_exit_with_a_message(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--task", "pos", "--batch-size", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--batch-size must be >= 1, got 0" in done.stderr
