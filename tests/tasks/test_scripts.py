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

from tests.tasks.helpers import REPO, write_tagged

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


@pytest.fixture
def small_pos(tmp_path) -> dict:
    """50 training sentences: one epoch is 50 updates of the POS runs (tiny_pos' 150 trained 3 times as long)."""
    return {"train": write_tagged(tmp_path / "train50.txt", 50, 0), "dev": write_tagged(tmp_path / "dev.txt", 30, 1)}


def test_reproduce_pos_figure1(small_pos, tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    argv = ["--train", str(small_pos["train"]), "--dev", str(small_pos["dev"]), "--format", "slash", "--epochs", "1",
            "--time-limit", "20", "--eval-every-seconds", "5", "--results-dir", str(out), "--runs-dir", str(runs)]
    assert _script("reproduce_pos").main(argv) == 0
    rows = _rows(out / "pos_figure1.csv")
    assert [(r["run"], r["workers"], r["optimizer"], r["updates"]) for r in rows] == [
        ("SGD, 1 worker", "1", "sgd", "50"), ("SGD, 2 workers", "2", "sgd", "50"),
        ("Adam, 1 worker", "1", "adam", "50")]
    assert all(0.0 <= float(r["best held-out accuracy"]) <= 1.0 for r in rows)
    assert (out / "pos_figure1.png").read_bytes()[:4] == b"\x89PNG"
    assert "Command: `python -m scripts.reproduce_pos --train" in (out / "pos_figure1.md").read_text()
    assert json.loads((runs / "sgd-2" / "summary.json").read_text())["workers"] == 2
    before = (runs / "adam-1" / "summary.json").stat().st_mtime
    assert _script("reproduce_pos").main(argv + ["--reuse"]) == 0  # reads the runs back, trains nothing
    assert (runs / "adam-1" / "summary.json").stat().st_mtime == before
    assert _script("reproduce_pos").main(argv + ["--only-report"]) == 0
    assert (runs / "adam-1" / "summary.json").stat().st_mtime == before
    assert "against Adam (held-out accuracy, mean over seeds)" in (out / "pos_figure1.md").read_text()


def test_reproduce_pos_seeds(small_pos, tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    assert _script("reproduce_pos").main([
        "--train", str(small_pos["train"]), "--dev", str(small_pos["dev"]), "--format", "slash", "--epochs", "1",
        "--workers", "1", "--no-adam", "--recipe", "default", "--seeds", "3,4", "--time-limit", "20",
        "--eval-every-seconds", "5", "--results-dir", str(out), "--runs-dir", str(runs)]) == 0
    assert sorted(p.name for p in runs.iterdir()) == ["sgd-1-seed3", "sgd-1-seed4"]
    assert [r["run"] for r in _rows(out / "pos_figure1.csv")] == ["SGD, 1 worker, seed 3", "SGD, 1 worker, seed 4"]
    assert json.loads((runs / "sgd-1-seed4" / "summary.json").read_text())["lr"] == 0.1  # the default recipe's
    assert "| SGD, 1 worker | 2 | 50 +- 0 |" in (out / "pos_figure1_seeds.md").read_text()


def test_reproduce_nmt_table1(tiny_nmt, tmp_path):
    out, runs = tmp_path / "results", tmp_path / "runs"
    argv = ["--train", str(tiny_nmt["train"]), "--dev", str(tiny_nmt["dev"]), "--updates", "6", "--batch-size", "16",
            "--eval-every", "3", "--beam", "2", "--vocab-size", "100", "--results-dir", str(out),
            "--runs-dir", str(runs)]
    assert _script("reproduce_nmt").main(argv) == 0
    rows = _rows(out / "nmt_table1.csv")
    assert [(r["run"], r["seed"]) for r in rows] == [("1 worker", "0"), ("2 workers", "0")]
    assert all(int(r["updates"]) == 6 for r in rows)
    assert float(rows[0]["hours per 90k"]) == pytest.approx(90000 / float(rows[0]["updates/s"]) / 3600, abs=0.01)
    assert "1 GPU 26.89 h, BLEU 14.42" in (out / "nmt_table1.md").read_text()
    assert (out / "nmt_figure2.png").read_bytes()[:4] == b"\x89PNG"


def test_reproduce_nmt_seeds_sync_test_sets_and_bootstrap(tiny_nmt, tmp_path):
    """#13: every configuration once per seed, the sync baseline, each best checkpoint decoded on a test set (kept in
    the run directory), mean +- std per configuration, sacreBLEU's paired bootstrap; --only-report redoes nothing."""
    out, runs = tmp_path / "results", tmp_path / "runs"
    argv = ["--train", str(tiny_nmt["train"]), "--dev", str(tiny_nmt["dev"]), "--updates", "4", "--batch-size", "16",
            "--eval-every", "2", "--beam", "2", "--vocab-size", "100", "--seeds", "0,1", "--sync",
            "--test-sets", str(tiny_nmt["dev"]), "--bootstrap", "50", "--results-dir", str(out),
            "--runs-dir", str(runs)]
    assert _script("reproduce_nmt").main(argv) == 0
    rows = _rows(out / "nmt_table1.csv")
    assert [(r["run"], r["mode"], r["seed"]) for r in rows] == [
        ("1 worker", "hogwild", "0"), ("2 workers", "hogwild", "0"), ("2 workers, sync", "sync", "0"),
        ("1 worker", "hogwild", "1"), ("2 workers", "hogwild", "1"), ("2 workers, sync", "sync", "1")]  # seed-major
    assert sorted(p.name for p in runs.iterdir()) == ["sync-2-seed0", "sync-2-seed1", "workers-1-seed0",
                                                      "workers-1-seed1", "workers-2-seed0", "workers-2-seed1"]
    scored = json.loads((runs / "workers-1-seed1" / "test.dev.beam2.json").read_text())
    assert scored["sentences"] == 20 and float(rows[3]["dev BLEU (beam 2)"]) == pytest.approx(scored["bleu"])
    assert len((runs / "workers-1-seed1" / "test.dev.beam2.hyp").read_text().splitlines()) == 20
    seeds = (out / "nmt_table1_seeds.md").read_text()
    assert "| 1 worker | 2 |" in seeds and "| 2 workers, sync | 2 |" in seeds
    assert "Paired bootstrap on dev (20 sentences; sacreBLEU nrefs:1|bs:50|" in seeds
    assert seeds.count("p = ") == 2  # the 2-worker and sync systems against the best 1-worker one
    assert seeds.count("this test calls a difference of ") == 2  # the size of difference it could have seen
    heldout = _rows(out / "nmt_heldout_loss.csv")  # which counts are read depends on when evaluations ran: the end
    assert [(r["run"], r["seed"]) for r in heldout] == [(r["run"], r["seed"]) for r in rows]
    assert list(heldout[0]) == ["run", "seed", "at 1", "at 2", "at 3", "at 4"]
    final = json.loads((runs / "workers-1-seed1" / "summary.json").read_text())["final_metrics"]["loss"]
    assert float(heldout[3]["at 4"]) == pytest.approx(final)
    assert "| 2 workers, sync | 2 |" in (out / "nmt_heldout_loss_seeds.md").read_text()
    assert (out / "nmt_heldout_loss.png").read_bytes()[:4] == b"\x89PNG"
    stamps = {p: p.stat().st_mtime for p in runs.glob("*/*") if p.name in ("summary.json", "test.dev.beam2.hyp")}
    assert _script("reproduce_nmt").main(argv + ["--only-report"]) == 0
    assert {p: p.stat().st_mtime for p in stamps} == stamps
    assert (out / "nmt_table1_seeds.md").read_text().split("Machine:")[1] == seeds.split("Machine:")[1]


def test_only_report_names_the_missing_runs(tiny_nmt, tmp_path):
    with pytest.raises(SystemExit, match=r"--only-report: no finished run .*workers-1-seed0"):
        _script("reproduce_nmt").main(["--train", str(tiny_nmt["train"]), "--dev", str(tiny_nmt["dev"]),
                                       "--runs-dir", str(tmp_path / "runs"), "--only-report"])


def test_compare_optimizers(tiny_pos, tmp_path):
    out = tmp_path / "results"
    assert _script("compare_optimizers").main([
        "--train", str(tiny_pos["train"]), "--dev", str(tiny_pos["dev"]), "--optimizers", "adam",
        "--time-limit", "1", "--eval-every-seconds", "1", "--target", "0.3", "--results-dir", str(out),
        "--runs-dir", str(tmp_path / "runs")]) == 0
    rows = _rows(out / "compare_optimizers.csv")
    assert [(r["run"], r["mode"], r["workers"]) for r in rows] == [
        ("adam, 1 worker", "single", "1"), ("adam, 2 workers hogwild", "hogwild", "2"),
        ("sgd, 2 workers sync", "sync", "2")]
    assert "seconds to accuracy 0.3" in rows[0]
    assert (out / "compare_optimizers.png").read_bytes()[:4] == b"\x89PNG"


def test_scripts_reject_bad_flags(tiny_pos, capsys):
    corpus = ["--train", str(tiny_pos["train"]), "--dev", str(tiny_pos["dev"])]
    for argv, message in ((["--workers", "1"], "--workers must be >= 2"),
                          (["--lrs", "sgd:0.1"], "--lrs takes OPT=LR pairs"),
                          (["--dev-limit", "-1"], "--dev-limit: must be >= 0, got -1"),  # run.py's check
                          ([], "--train: ")):  # the default corpus, missing here: named before anything runs
        with pytest.raises(SystemExit) as exit_:
            _script("compare_optimizers").main(corpus + argv if argv else argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err, argv


def test_reproduce_nmt_plans_workers_sharing_one_gpu(tiny_nmt):
    module = _script("reproduce_nmt")
    plan = module.planned_runs(module.parse_args(["--train", str(tiny_nmt["train"]), "--dev", str(tiny_nmt["dev"]),
                                                  "--gpus", "1", "--workers-per-gpu", "2", "--sync", "--seeds", "5"]))
    assert [(config, name, o.gpus, o.workers_per_gpu, o.mode, o.seed) for config, _, name, o in plan] == [
        ("1 worker on 1 GPU", "gpu1-workers-1-seed5", 1, 1, "hogwild", 5),
        ("2 workers on 1 GPU", "gpu1-workers-2-seed5", 1, 2, "hogwild", 5),
        ("2 workers on 1 GPU, sync", "sync-2-seed5", 1, 2, "sync", 5)]
    with pytest.raises(SystemExit):
        module.parse_args(["--gpus", "2", "--workers-per-gpu", "2"])
