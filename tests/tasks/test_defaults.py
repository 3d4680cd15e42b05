"""tasks.defaults: which recipe a run follows, the one rule for a run's learning rate, schedule and floor (pinned per
task x optimizer x schedule x recipe; run.py's options and scripts/train_serial.py both take it), the per-task values,
the --help texts generated from the tables, and (slow) that the default recipe trains a small real treebank past a
clear accuracy bar where the paper's settings do not (issue #11: 76% on a 2,200-sentence treebank)."""
import json

import pytest

from hogwild import Config
from hogwild.lr_schedule import make_schedule
from hogwild.shared_optim import OPTIMIZERS
from hogwild.tasks import defaults
from hogwild.tasks.defaults import (DECAY_UPDATES, RECIPES, check_rates, default_decay_updates, default_lr,
                                    default_lr_decay, default_optimizer, default_word_min_freq, resolve_recipe,
                                    schedule_fields)
from hogwild.tasks.options import OptionError, RunOptions
from tests.tasks.helpers import run_py


def test_recipe_follows_the_preset_unless_given():
    assert RECIPES == ("default", "paper")
    assert [resolve_recipe(None, "small"), resolve_recipe(None, "paper")] == ["default", "paper"]
    assert [resolve_recipe("paper", "small"), resolve_recipe("default", "paper")] == ["paper", "default"]
    assert [default_optimizer(task, recipe) for recipe in RECIPES for task in ("pos", "nmt")] == [
        "sgd", "adam", "sgd", "sgd"]
    assert default_optimizer("pos", "default", "eamsgd") == "msgd"  # EAMSGD needs momentum
    assert [default_word_min_freq("default"), default_word_min_freq("paper"), default_word_min_freq("default", True)
            ] == [2, 10, 10]


def test_paper_rates_per_task_and_optimizer():
    assert [default_lr(task, opt, "paper") for task in ("pos", "nmt") for opt in ("sgd", "msgd", "adam", "adadelta")
            ] == [0.03, 0.01, 1e-3, 1.0, 0.1, 0.03, 1e-3, 1.0]
    assert [default_lr_decay(task, opt, recipe="paper") for task in ("pos", "nmt") for opt in ("sgd", "adam")] == [
        0.0135, 0.0, 0.0, 0.0]
    assert default_lr_decay("pos", "sgd", warmup_steps=10, recipe="paper") == 0.0  # a warm-up replaces the decay
    assert default_decay_updates("paper") is None  # per epoch


def test_default_recipe_rates_and_decay_counted_in_updates():
    assert [default_lr(task, opt) for task in ("pos", "nmt") for opt in ("sgd", "msgd", "adam", "adadelta")] == [
        0.1, 0.01, 1e-3, 1.0, 0.1, 0.03, 1e-3, 1.0]
    assert [default_lr_decay(task, opt) for task in ("pos", "nmt") for opt in ("sgd", "adam")] == [
        0.0225, 0.0, 0.0, 0.0]
    assert default_lr_decay("pos", "sgd", warmup_steps=10) == 0.0
    assert default_decay_updates() == DECAY_UPDATES == 40_000
    fields = schedule_fields("pos", "sgd", 0.1)
    assert fields == {"lr_schedule": "linear_decay", "decay_per_epoch": 0.0225, "decay_updates": 40_000,
                      "warmup_steps": 0, "min_lr": pytest.approx(0.001)}
    schedule = Config(lr=0.1, **fields).schedule()
    # the same values on a 1.7k-sentence treebank (epoch 10 at update 17,000) as on Brown (still epoch 0)
    assert [schedule(step, epoch) for step, epoch in ((0, 0), (17_000, 9), (17_000, 0), (40_000, 0))] == \
        pytest.approx([0.1, 0.1 - 0.0225 * 17 / 40, 0.1 - 0.0225 * 17 / 40, 0.0775], abs=1e-15)
    assert schedule(176_000, 1) == pytest.approx(0.001, abs=1e-15) and schedule(400_000, 0) == 0.001  # the floor
    paper = Config(lr=0.03, **schedule_fields("pos", "sgd", 0.03, recipe="paper")).schedule()
    assert [paper(step, epoch) for step, epoch in ((0, 0), (1_728, 1), (3_456, 2), (17_000, 9))] == \
        pytest.approx([0.03, 0.0165, 0.003, 0.0003], abs=1e-15)  # ud-german-lit: at the floor after 3 epochs
    assert schedule_fields("pos", "sgd", 0.1, decay_updates=1000)["decay_updates"] == 1000


@pytest.mark.parametrize("task, optimizer, lr, lr_decay, warmup, expected", [
    # default decay: only POS + SGD decays (the paper), floored at 1% of the rate
    ("pos", "sgd", 0.03, None, 0, ("linear_decay", 0.0135, 0, 0.0003)),
    ("pos", "adam", 1e-3, None, 0, ("constant", 0.0, 0, 0.0)),
    ("nmt", "sgd", 0.1, None, 0, ("constant", 0.0, 0, 0.0)),
    ("nmt", "adam", 1e-3, None, 0, ("constant", 0.0, 0, 0.0)),
    # an explicit decay decays whatever the task and optimizer
    ("pos", "sgd", 0.05, 0.02, 0, ("linear_decay", 0.02, 0, 0.0005)),
    ("pos", "adam", 2e-3, 1e-4, 0, ("linear_decay", 1e-4, 0, 2e-5)),
    ("nmt", "sgd", 0.1, 0.01, 0, ("linear_decay", 0.01, 0, 0.001)),
    ("nmt", "adam", 2e-3, 5e-4, 0, ("linear_decay", 5e-4, 0, 2e-5)),
    ("pos", "sgd", 0.03, 0.0, 0, ("constant", 0.0, 0, 0.0)),  # --lr-decay 0 turns the paper's decay off
    # a warm-up: warmup_scaled, no decay, no floor beyond --min-lr
    ("pos", "sgd", 0.03, None, 100, ("warmup_scaled", 0.0, 100, 0.0)),
    ("pos", "adam", 1e-3, None, 100, ("warmup_scaled", 0.0, 100, 0.0)),
    ("nmt", "sgd", 0.1, None, 50, ("warmup_scaled", 0.0, 50, 0.0)),
    ("nmt", "adam", 1e-3, 0.0, 50, ("warmup_scaled", 0.0, 50, 0.0)),
])
def test_schedule_fields_per_task_optimizer_and_schedule(task, optimizer, lr, lr_decay, warmup, expected):
    fields = schedule_fields(task, optimizer, lr, lr_decay, warmup, recipe="paper")
    assert (fields["lr_schedule"], fields["decay_per_epoch"], fields["warmup_steps"]) == expected[:3]
    assert fields["min_lr"] == pytest.approx(expected[3], rel=1e-12, abs=0.0)
    config = Config(lr=lr, **fields)  # the fields are exactly what hogwild.Config takes ...
    make_schedule(config.lr_schedule, lr, decay_per_epoch=config.decay_per_epoch,  # ... and a valid schedule
                  warmup_steps=config.warmup_steps, min_lr=config.min_lr)


def engine(**values) -> Config:
    return RunOptions(**values).resolved().engine_config(["cpu"])


def test_min_lr_raises_the_floor_and_config_refuses_it_above_the_rate_naming_the_flag():
    assert schedule_fields("pos", "sgd", 0.03, min_lr=0.001)["min_lr"] == 0.001  # above lr * 1%: kept
    assert schedule_fields("pos", "sgd", 0.03, min_lr=0.0001)["min_lr"] == pytest.approx(0.0003)  # below: lr * 1%
    assert schedule_fields("nmt", "sgd", 0.1, min_lr=0.05)["min_lr"] == 0.05  # constant: --min-lr as given
    with pytest.raises(OptionError, match=r"^--min-lr: must not exceed lr \(0.03\), got 0.05$"):
        engine(task="pos", recipe="paper", min_lr=0.05)


def test_decay_and_warmup_together_are_refused_naming_the_flag():
    with pytest.raises(ValueError, match="^--lr-decay: 0.01 cannot be combined with --warmup-steps 10"):
        schedule_fields("nmt", "sgd", 0.1, lr_decay=0.01, warmup_steps=10)
    with pytest.raises(ValueError, match="^--lr-decay: 0.01 cannot be combined with --warmup-steps 10"):
        engine(task="pos", lr_decay=0.01, warmup_steps=10)
    with pytest.raises(OptionError, match=r"^--lr-decay: must be >= 0, got -0.5"):  # Config's check, as it enters
        RunOptions(lr_decay=-0.5)


def test_run_options_take_the_rule():
    pos = RunOptions(task="pos", recipe="paper").resolved()
    assert (pos.lr, pos.lr_decay, pos.decay_updates) == (0.03, 0.0135, None)
    config = pos.engine_config(["cpu"])
    assert (config.lr_schedule, config.decay_per_epoch, config.min_lr) == ("linear_decay", 0.0135, pytest.approx(3e-4))
    assert config.decay_updates is None  # the paper's decay counts epochs
    warm = RunOptions(task="pos", warmup_steps=20).resolved()  # POS + SGD + warm-up: the paper's decay steps aside
    assert (warm.lr_decay, warm.decay_updates) == (0.0, None)
    config = warm.engine_config(["cpu", "cpu"])
    assert (config.lr_schedule, config.decay_per_epoch, config.warmup_steps) == ("warmup_scaled", 0.0, 20)


def test_recipes_resolve_per_task_and_preset():
    brown = ["tests/fixtures/data/slash"]
    cases = {  # (task, preset, recipe) -> (recipe, optimizer, lr, lr_decay, decay_updates, word_min_freq, clip)
        ("pos", "small", None): ("default", "sgd", 0.1, 0.0225, 40_000, 2, None),
        ("pos", "paper", None): ("paper", "sgd", 0.03, 0.0135, None, 10, None),  # --preset paper: the paper, whole
        ("pos", "small", "paper"): ("paper", "sgd", 0.03, 0.0135, None, 10, None),
        ("pos", "paper", "default"): ("default", "sgd", 0.1, 0.0225, 40_000, 2, None),
        ("nmt", "small", None): ("default", "adam", 1e-3, 0.0, None, None, 1.0),
        ("nmt", "paper", None): ("paper", "sgd", 0.1, 0.0, None, None, 1.0),
    }
    for (task, preset, recipe), expected in cases.items():
        train = brown if task == "pos" else ["tests/fixtures/data/tiny"]
        o = RunOptions(task=task, preset=preset, recipe=recipe, train=train).resolved()
        assert (o.recipe, o.optimizer, o.lr, o.lr_decay, o.decay_updates, o.word_min_freq, o.clip_norm) == expected
        config = o.engine_config(["cpu"])
        assert (config.optimizer, config.lr, config.decay_updates) == (expected[1], expected[2], expected[4])
        assert config.best_metric == {"pos": "accuracy", "nmt": "bleu"}[task]
    synthetic = RunOptions(task="pos").resolved()  # the synthetic task keeps its own vocabulary threshold
    assert (synthetic.recipe, synthetic.word_min_freq, synthetic.synthetic_size) == ("default", 10, 2000)
    flags = RunOptions(task="pos", train=brown, optimizer="adam", word_min_freq=3, recipe="paper").resolved()
    assert (flags.optimizer, flags.lr, flags.lr_decay, flags.word_min_freq) == ("adam", 1e-3, 0.0, 3)  # flags win
    unit = RunOptions(task="pos", decay_updates=5_000).resolved()
    assert unit.engine_config(["cpu"]).decay_updates == 5_000
    assert RunOptions(task="pos", recipe="paper", decay_updates=5_000).resolved().decay_updates == 5_000


def test_resolving_twice_changes_nothing():
    for values in ({"task": "pos"}, {"task": "nmt", "workers": 3}, {"task": "pos", "recipe": "paper", "steps": 9},
                   {"task": "nmt", "train": ["tests/fixtures/data/tiny"], "warmup_steps": 5}):
        once = RunOptions(**values).resolved()
        assert once.resolved() == once


@pytest.mark.parametrize("kwargs, message", [
    ({"recipe": "fast"}, "^--recipe: must be one of default, paper; got 'fast'"),
    ({"optimizer": "lbfgs"}, "^--optimizer: must be one of"),
    ({"word_min_freq": 0}, "^--word-min-freq: must be >= 1, got 0"),
    ({"task": "nmt", "word_min_freq": 2}, "^--word-min-freq: applies to --task pos only"),
])
def test_bad_recipe_flags_name_the_flag(kwargs, message):
    with pytest.raises(OptionError, match=message):
        RunOptions(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"decay_updates": 0}, r"^--decay-updates: must be > 0, got 0"),
    ({"task": "nmt", "decay_updates": 100}, r"^--decay-updates: sets the unit of a linear decay .*not of 'constant'"),
    ({"lr_decay": 0.0, "decay_updates": 100}, "^--decay-updates: sets the unit of a linear decay"),
    ({"warmup_steps": 10, "lr_decay": 0.0, "decay_updates": 100}, "^--decay-updates: sets the unit"),
])
def test_the_engine_refuses_a_decay_unit_without_a_decay_naming_the_flag(kwargs, message):
    with pytest.raises(OptionError, match=message):
        engine(**kwargs)


def test_a_new_optimizer_without_a_default_rate_is_named_at_once():
    """An optimizer added to hogwild/shared_optim.py alone: `import hogwild.tasks` (which runs this check on
    OPTIMIZERS) names the second file to edit; it raised KeyError: 'lion' from a --help text."""
    check_rates(OPTIMIZERS)
    with pytest.raises(ImportError) as error:
        check_rates((*OPTIMIZERS, "lion"))
    assert str(error.value) == ("tasks/defaults.py: no default learning rate for optimizer lion of "
                                "hogwild/shared_optim.py's OPTIMIZERS; add its usual rate to _ADAPTIVE_LR")


def test_help_texts_come_from_the_tables(monkeypatch):
    assert defaults.LR_TEXT.startswith("the recipe optimizer's: pos 0.1 (paper 0.03), nmt 0.001 (paper 0.1); ")
    assert "; adam 0.001; adamax 0.002" in defaults.LR_TEXT
    assert defaults.OPTIMIZER_TEXT.startswith("the recipe's: pos sgd, nmt adam (paper sgd); ")
    assert defaults.BATCH_SIZE_TEXT == "pos 1, nmt 64; synthetic task pos 1, nmt 32"
    assert defaults.CLIP_NORM_TEXT == "pos off, nmt 1"
    monkeypatch.setitem(defaults._ADAPTIVE_LR, "adam", 0.004)
    assert defaults._per_task(lambda task, recipe: default_lr(task, "adam", recipe)) == "0.004"


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
