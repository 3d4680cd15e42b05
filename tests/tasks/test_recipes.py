"""tasks.recipes: which recipe a run follows, and (slow) that the default recipe trains a small real treebank past a
clear accuracy bar where the paper's settings do not (issue #11: 76% on a 2,200-sentence treebank)."""
import json

import pytest

from hogwild.tasks.recipes import RECIPES, default_optimizer, default_word_min_freq, resolve_recipe
from tests.tasks.helpers import run_py


def test_recipe_follows_the_preset_unless_given():
    assert RECIPES == ("default", "paper")
    assert [resolve_recipe(None, "small"), resolve_recipe(None, "paper")] == ["default", "paper"]
    assert [resolve_recipe("paper", "small"), resolve_recipe("default", "paper")] == ["paper", "default"]
    with pytest.raises(ValueError, match="^--recipe: must be one of default, paper; got 'quick'"):
        resolve_recipe("quick", "small")
    assert [default_optimizer(task, recipe) for recipe in RECIPES for task in ("pos", "nmt")] == [
        "sgd", "adam", "sgd", "sgd"]
    assert [default_word_min_freq("default"), default_word_min_freq("paper"), default_word_min_freq("default", True)
            ] == [2, 10, 10]


@pytest.mark.slow
def test_default_recipe_trains_a_small_treebank_past_85_percent(corpus, tmp_path):
    # ud-german-lit (1,728 training sentences, UPOS), 3,000 updates on 2 workers (~2 epochs). Measured serially at
    # 3,000 updates: default recipe 90.1% dev accuracy, the paper's 59.5% (65.8% after 17,000 updates).
    out = tmp_path / "run"
    done = run_py("--task", "pos", "--train", str(corpus("ud-german-lit")), "--tag", "upos", "--workers", "2",
                  "--steps", "3000", "--eval-every", "1500", "--no-progress", "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["recipe"], summary["optimizer"], summary["lr"], summary["word_min_freq"]) == (
        "default", "sgd", 0.1, 2)
    assert summary["decay_updates"] == 40_000 and summary["data"]["words"] == 2549
    assert summary["best"]["value"] > 0.85, summary["best"]
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["recipe"] == "default" and config["config"]["decay_updates"] == 40_000
