"""tasks.learning_rate: the one rule for a run's learning rate, schedule and floor, pinned per task x optimizer x
schedule; run.py's options and scripts/train_serial.py both take it."""
import pytest

from hogwild import Config
from hogwild.schedules import make_schedule
from hogwild.tasks.learning_rate import default_lr, default_lr_decay, schedule_fields
from hogwild.tasks.options import RunOptions


def test_default_rates_per_task_and_optimizer():
    assert [default_lr(task, opt) for task in ("pos", "nmt") for opt in ("sgd", "msgd", "adam", "adadelta")] == [
        0.03, 0.01, 1e-3, 1.0, 0.1, 0.03, 1e-3, 1.0]
    assert [default_lr_decay(task, opt) for task in ("pos", "nmt") for opt in ("sgd", "adam")] == [
        0.0135, 0.0, 0.0, 0.0]
    assert default_lr_decay("pos", "sgd", warmup_steps=10) == 0.0  # a warm-up replaces the paper's decay


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
    fields = schedule_fields(task, optimizer, lr, lr_decay, warmup)
    assert (fields["lr_schedule"], fields["decay_per_epoch"], fields["warmup_steps"]) == expected[:3]
    assert fields["min_lr"] == pytest.approx(expected[3], rel=1e-12, abs=0.0)
    config = Config(lr=lr, **fields)  # the fields are exactly what hogwild.Config takes ...
    make_schedule(config.lr_schedule, lr, decay_per_epoch=config.decay_per_epoch,  # ... and a valid schedule
                  warmup_steps=config.warmup_steps, min_lr=config.min_lr)


def test_min_lr_raises_the_floor_but_never_above_the_rate():
    assert schedule_fields("pos", "sgd", 0.03, min_lr=0.001)["min_lr"] == 0.001  # above lr * 1%: kept
    assert schedule_fields("pos", "sgd", 0.03, min_lr=0.0001)["min_lr"] == pytest.approx(0.0003)  # below: lr * 1%
    assert schedule_fields("nmt", "sgd", 0.1, min_lr=0.05)["min_lr"] == 0.05  # constant: --min-lr as given
    with pytest.raises(ValueError, match=r"^--min-lr: must be in \[0, --lr\] = \[0, 0.03\], got 0.05"):
        schedule_fields("pos", "sgd", 0.03, min_lr=0.05)


def test_decay_and_warmup_together_are_refused_where_the_flags_enter():
    with pytest.raises(ValueError, match="^--lr-decay: 0.01 cannot be combined with --warmup-steps 10"):
        schedule_fields("nmt", "sgd", 0.1, lr_decay=0.01, warmup_steps=10)
    with pytest.raises(ValueError, match="^--lr-decay: 0.01 cannot be combined with --warmup-steps 10"):
        RunOptions(task="pos", lr_decay=0.01, warmup_steps=10)
    with pytest.raises(ValueError, match=r"^--min-lr: must be in \[0, --lr\]"):
        RunOptions(task="pos", lr=0.01, min_lr=0.02)
    with pytest.raises(ValueError, match=r"^--lr-decay: must be >= 0, got -0.5"):
        schedule_fields("pos", "sgd", 0.03, lr_decay=-0.5)


def test_run_options_take_the_rule():
    pos = RunOptions(task="pos").resolved()
    assert (pos.lr, pos.lr_decay) == (0.03, 0.0135)
    config = pos.engine_config(["cpu"], "accuracy")
    assert (config.lr_schedule, config.decay_per_epoch, config.min_lr) == ("linear_decay", 0.0135, pytest.approx(3e-4))
    warm = RunOptions(task="pos", warmup_steps=20).resolved()  # POS + SGD + warm-up: the paper's decay steps aside
    assert warm.lr_decay == 0.0
    config = warm.engine_config(["cpu", "cpu"], "accuracy")
    assert (config.lr_schedule, config.decay_per_epoch, config.warmup_steps) == ("warmup_scaled", 0.0, 20)
