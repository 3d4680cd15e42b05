"""scripts.series and tasks.plotting: tables (Markdown + CSV with the command), time to target, figures."""
import csv
from pathlib import Path

import pytest

from hogwild.tasks.plotting import plot_curves
from scripts.series import RunResult, command_line, script_argv, write_table
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
