"""scripts.series and tasks.plotting: tables (Markdown + CSV with the command), time to target, figures."""
import csv
import importlib
from pathlib import Path

import pytest

from hogwild.tasks.plotting import plot_curves
from scripts.series import RunResult, command_line, script_argv, value_at, write_table
from hogwild.tasks.rundir import Curves


def test_write_table_markdown_and_csv(tmp_path):
    rows = [{"workers": 1, "minutes": 12.345678, "bleu": None}, {"workers": 2, "minutes": 6.5, "bleu": 14.46}]
    text = write_table(rows, ["workers", "minutes", "bleu"], tmp_path / "t.md", tmp_path / "t.csv", title="T",
                       notes=["a note"])
    lines = text.splitlines()
    assert lines[0] == "# T" and lines[2].startswith("Command: `python ") and lines[3].startswith("Machine: ")
    assert lines[5:9] == ["| workers | minutes | bleu |", "|---|---|---|", "| 1 | 12.35 | - |", "| 2 | 6.5 | 14.46 |"]
    assert lines[-1] == "a note"
    with open(tmp_path / "t.csv") as file:
        assert list(csv.DictReader(file)) == [{"workers": "1", "minutes": "12.345678", "bleu": ""},
                                              {"workers": "2", "minutes": "6.5", "bleu": "14.46"}]


def test_time_to_target_is_the_first_evaluation_reaching_it():
    curves = Curves("x", "accuracy", eval_seconds=[0.0, 10.0, 20.0, 30.0], eval_updates=[0, 1, 2, 3],
                    values=[0.1, 0.79, 0.8, 0.7])
    result = RunResult("x", Path("."), {"best": {"value": 0.8}, "wall_seconds": 90.0}, curves)
    assert (result.time_to(0.8), result.time_to(0.5), result.time_to(0.9)) == (20.0, 10.0, None)
    assert (result.heldout(), result.minutes) == (0.8, 1.5)


def test_value_at_reads_a_curve_at_equal_updates():
    updates, losses = [0, 250, 500, 1600, 1600, 1850], [9.0, 6.0, 5.0, 4.5, 4.4, 4.0]
    assert value_at(updates, losses, 250, gap=500) == 6.0  # an evaluation made there
    assert value_at(updates, losses, 400, gap=500) == pytest.approx(5.4)  # on the line from 250 to 500
    assert value_at(updates, losses, 1000, gap=500) is None  # 500 -> 1600 is a longer gap than 500
    assert value_at(updates, losses, 1000, gap=1100) == pytest.approx(5.0 + (4.4 - 5.0) * 500 / 1100)
    assert value_at(updates, losses, 1600, gap=500) == 4.4  # a replayed update count: the later evaluation
    assert value_at(updates, losses, 1700, gap=500) == pytest.approx(4.4 - 0.4 * 100 / 250)
    assert value_at(updates, losses, 1900, gap=500) is None  # past the curve's end
    assert value_at([], [], 0, gap=500) is None


def test_plot_curves_writes_a_png_and_needs_runs(tmp_path):
    curves = Curves("run", "bleu", [1.0, 2.0], [10, 20], [3.0, 2.5], [0.0, 2.0], [0, 20], [0.0, 1.5])
    path = plot_curves([curves], tmp_path / "sub" / "f.png", title="t")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="at least one run"):
        plot_curves([], tmp_path / "g.png")


def test_the_command_is_the_module_form_run_from_the_repository_root():
    argv = script_argv(str(Path("scripts") / "reproduce_pos.py"), ["--time-limit", "60", "--out", "a b"])
    assert argv == ["-m", "scripts.reproduce_pos", "--time-limit", "60", "--out", "a b"]
    assert command_line(argv) == "python -m scripts.reproduce_pos --time-limit 60 --out 'a b'"


def test_mean_std_over_seeds():
    from scripts.series import mean_std
    assert mean_std([1.0, 2.0, 3.0]) == "2 +- 1"
    assert mean_std([0.5, None]) == "0.5"  # a missing value (a run without that figure) is left out
    assert mean_std([None, "-"]) is None


def _run(seconds, updates, values):
    from types import SimpleNamespace

    from hogwild.tasks.rundir import Curves
    return SimpleNamespace(curves=Curves("r", "accuracy", eval_seconds=seconds, eval_updates=updates, values=values))


def test_mean_curve_steps_each_run_and_stops_at_the_shortest():
    from scripts.reproduce_pos import mean_curve
    runs = [_run([0, 10, 20], [0, 100, 200], [0.1, 0.5, 0.7]), _run([0, 15], [0, 150], [0.3, 0.9])]
    assert mean_curve(runs, "eval_seconds") == [(0, 0.2), (10, pytest.approx(0.4)), (15, pytest.approx(0.7))]
    assert mean_curve(runs, "eval_updates") == [(0, 0.2), (100, pytest.approx(0.4)), (150, pytest.approx(0.7))]


def test_first_lasting_lead_is_where_sgd_stays_ahead():
    from scripts.reproduce_pos import first_lasting_lead
    adam = [(0, 0.5), (10, 0.8), (20, 0.85), (30, 0.86)]
    assert first_lasting_lead([(0, 0.3), (10, 0.81), (20, 0.84), (30, 0.9)], adam) == 30  # ahead at 10, not at 20
    assert first_lasting_lead([(0, 0.3), (12, 0.9)], adam) == 12
    assert first_lasting_lead([(0, 0.3), (30, 0.5)], adam) is None
    assert first_lasting_lead([], adam) is None


def test_overtaking_sentence_names_time_and_updates():
    from scripts.reproduce_pos import overtaking
    sgd = [_run([0, 60, 120], [0, 1000, 2000], [0.2, 0.7, 0.95])]
    adam = [_run([0, 60, 120], [0, 400, 800], [0.5, 0.8, 0.9])]
    assert overtaking({"SGD, 2 workers": sgd, "Adam, 1 worker": adam}) == [
        "SGD, 2 workers against Adam (held-out accuracy, mean over seeds): at or above it from 2 minutes on; by "
        "updates, not within the runs (updates)."]


def test_an_interrupted_run_is_not_finished(tmp_path):
    import json

    from scripts.series import finished_summary, run_series
    for name, reason in (("done", "max_steps"), ("stopped", "signal SIGINT"), ("none", None)):
        (tmp_path / name).mkdir()
        if reason:
            (tmp_path / name / "summary.json").write_text(json.dumps({"stop_reason": reason}))
    assert finished_summary(tmp_path / "done") == {"stop_reason": "max_steps"}
    assert finished_summary(tmp_path / "stopped") is None and finished_summary(tmp_path / "none") is None
    with pytest.raises(SystemExit, match=r"no finished run .*stopped, .*none;"):
        run_series([("b", "stopped", None), ("c", "none", None)], tmp_path, [], report_only=True)
    (tmp_path / "done" / "summary.json").write_text(json.dumps(
        {"stop_reason": "max_steps", "updates": 7, "wall_seconds": 60.0, "best": {"metric": "accuracy", "value": 0.5}}))
    (tmp_path / "done" / "metrics.jsonl").write_text(json.dumps({"kind": "train", "elapsed": 1.0, "updates": 7,
                                                                 "loss": 2.0}) + "\n")
    said = []
    results = run_series([("a", "done", None), ("b", "stopped", None), ("c", "none", None)], tmp_path, [],
                         say=said.append, report_only=True)  # the runs finished so far, the others named
    assert [r and r.label for r in results] == ["a", None, None] and results[0].curves.loss == [2.0]
    assert said == [f"[1/3] a: 7 updates, 1.0 minutes of training, max_steps, best accuracy 0.5 ({tmp_path / 'done'})",
                    f"[2/3] b: not finished, left out of the report ({tmp_path / 'stopped'})",
                    f"[3/3] c: not finished, left out of the report ({tmp_path / 'none'})"]


def test_reproduce_pos_refuses_repeated_seeds_and_names_any_seed_but_0(tmp_path):
    from scripts import reproduce_pos
    from tests.tasks.helpers import write_tagged
    with pytest.raises(SystemExit):
        reproduce_pos.parse_args(["--seeds", "0,0"])
    train = ["--train", str(write_tagged(tmp_path / "train.txt", 20, 0))]
    names = lambda argv: [name for _, _, name, _ in
                          reproduce_pos.planned_runs(reproduce_pos.parse_args(train + argv))]
    assert names([]) == ["sgd-1", "sgd-2", "adam-1"]  # the directory names of earlier runs
    assert names(["--seed", "1"]) == ["sgd-1-seed1", "sgd-2-seed1", "adam-1-seed1"]
    assert names(["--seeds", "0,1", "--no-adam", "--workers", "1"]) == ["sgd-1-seed0", "sgd-1-seed1"]


def test_nmt_test_sets_may_not_share_a_name():
    from scripts.reproduce_nmt import test_sets
    assert [t.name for t in test_sets("a/test,b/dev", "fr", "en")] == ["test", "dev"]
    with pytest.raises(SystemExit, match="two test sets are named test"):
        test_sets("a/test,b/test", "fr", "en")


def test_a_kept_test_score_is_reused_only_for_the_same_corpus_and_beam(tmp_path, monkeypatch):
    import json
    from types import SimpleNamespace

    import torch

    import hogwild.tasks.inference as inference
    from scripts.nmt_tests import TestSet, score_test_set
    for prefix in ("a/test", "b/test"):
        (tmp_path / prefix).parent.mkdir()
        (tmp_path / f"{prefix}.fr").write_text("le chat noir dort ici\nun chien brun court vite\n")
        (tmp_path / f"{prefix}.en").write_text("the black cat sleeps here\na brown dog runs fast\n")
    decoded = []

    def translate(sources, beam, batch_size):
        decoded.append(beam)
        return ["the black cat sleeps here", "a brown dog runs fast"]

    monkeypatch.setattr(inference, "load_translator",
                        lambda run_dir: SimpleNamespace(model=torch.nn.Linear(1, 1), translate=translate))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = TestSet("test", str(tmp_path / "a/test"), "fr", "en")
    assert score_test_set(run_dir, first, beam=2)["bleu"] == pytest.approx(100.0) and decoded == [2]
    assert score_test_set(run_dir, first, beam=2)["prefix"] == first.prefix and decoded == [2]  # read back
    other = TestSet("test", str(tmp_path / "b/test"), "fr", "en")
    assert score_test_set(run_dir, other, beam=2)["prefix"] == other.prefix and decoded == [2, 2]  # decoded again
    assert json.loads((run_dir / "test.test.beam2.json").read_text())["prefix"] == other.prefix


def test_reproduce_nmt_runs_the_sync_baseline_on_the_first_seeds_only(tmp_path):
    from scripts import reproduce_nmt
    from tests.tasks.helpers import write_parallel
    data = ["--train", str(write_parallel(tmp_path / "train", 20, 0)),
            "--dev", str(write_parallel(tmp_path / "dev", 5, 1))]
    names = lambda argv: [name for _, _, name, _ in
                          reproduce_nmt.planned_runs(reproduce_nmt.parse_args(data + argv))]
    assert names(["--seeds", "0,1", "--sync", "--sync-seeds", "1"]) == [
        "workers-1-seed0", "workers-2-seed0", "sync-2-seed0", "workers-1-seed1", "workers-2-seed1"]
    assert names(["--seeds", "0,1", "--sync"])[-1] == "sync-2-seed1"
    with pytest.raises(SystemExit):
        reproduce_nmt.parse_args(["--sync-seeds", "-1"])


@pytest.mark.parametrize("name", ["reproduce_pos", "reproduce_nmt", "compare_optimizers"])
def test_results_go_beside_the_runs_unless_a_folder_is_named(tmp_path, name):
    """A first run of a script must not replace the committed tables in docs/results (it did, by default): its
    tables and figure go to its --runs-dir; docs/results/... is written only when --results-dir names it."""
    from tests.tasks.helpers import write_parallel, write_tagged
    script = importlib.import_module(f"scripts.{name}")
    if name == "reproduce_nmt":
        data = ["--train", str(write_parallel(tmp_path / "train", 20, 0)),
                "--dev", str(write_parallel(tmp_path / "dev", 5, 1))]
    else:
        data = ["--train", str(write_tagged(tmp_path / "train.txt", 20, 0)),
                "--dev", str(write_tagged(tmp_path / "dev.txt", 5, 1))]
    default = script.parse_args(data)
    assert (default.runs_dir, default.results_dir) == (f"runs/{name}", f"runs/{name}")
    assert script.parse_args(data + ["--runs-dir", "runs/x"]).results_dir == "runs/x"
    assert script.parse_args(data + ["--results-dir", "docs/results/x"]).results_dir == "docs/results/x"
