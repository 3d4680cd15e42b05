"""hogwild.lr_schedule: exact learning rates per (step, epoch) and rejection of bad values."""
import pickle

import pytest

from hogwild.lr_schedule import SCHEDULES, LRSchedule, make_schedule


def test_constant_ignores_step_and_epoch():
    schedule = make_schedule("constant", 0.1)
    assert [schedule(s, e) for s, e in [(0, 0), (7, 0), (90_000, 3)]] == [0.1, 0.1, 0.1]


def test_linear_decay_pos_paper_values():
    # Hogwild POS tagger: lr 0.03, minus 0.0135 after each epoch, floored at min_lr
    schedule = make_schedule("linear_decay", 0.03, decay_per_epoch=0.0135)
    assert schedule(0, 0) == 0.03
    assert schedule(123, 0) == 0.03  # constant within an epoch
    assert schedule(40_472, 1) == pytest.approx(0.0165, abs=1e-15)
    assert schedule(80_944, 2) == pytest.approx(0.003, abs=1e-15)
    assert schedule(0, 3) == 0.0  # 0.03 - 0.0405 < 0 -> floored at min_lr 0


def test_linear_decay_floor_at_min_lr():
    schedule = make_schedule("linear_decay", 0.03, decay_per_epoch=0.0135, min_lr=0.005)
    assert schedule(0, 1) == pytest.approx(0.0165, abs=1e-15)
    assert schedule(0, 2) == 0.005
    assert schedule(0, 10) == 0.005


def test_linear_decay_per_updates_is_spread_evenly_and_ignores_the_epoch():
    # The paper's decay (0.0135 per 40k-sentence epoch) counted in updates: the same pace on a 2k-sentence corpus
    schedule = make_schedule("linear_decay", 0.03, decay_per_epoch=0.0135, decay_updates=40_000, min_lr=0.0003)
    assert schedule(0, 0) == 0.03
    assert schedule(10_000, 5) == pytest.approx(0.03 - 0.0135 / 4, abs=1e-15)
    assert schedule(40_000, 0) == pytest.approx(0.0165, abs=1e-15)
    assert schedule(80_000, 40) == pytest.approx(0.003, abs=1e-15)
    assert schedule(88_000, 0) == 0.0003  # 0.03 - 0.0297 = 0.0003: at the floor from here on
    assert schedule(500_000, 3) == 0.0003


def test_warmup_scaled_ramps_linearly_to_workers_times_base():
    schedule = make_schedule("warmup_scaled", 0.1, warmup_steps=4, workers=3)
    got = [schedule(step, 0) for step in range(7)]
    assert got == pytest.approx([0.1, 0.15, 0.2, 0.25, 0.3, 0.3, 0.3], abs=1e-15)
    assert schedule(1000, 5) == pytest.approx(0.3, abs=1e-15)


def test_warmup_scaled_without_warmup_is_scaled_from_step_zero():
    assert make_schedule("warmup_scaled", 0.05, workers=4)(0, 0) == pytest.approx(0.2, abs=1e-15)
    assert make_schedule("warmup_scaled", 0.05, warmup_steps=10, workers=1)(3, 0) == 0.05


def test_schedule_is_picklable_and_frozen():
    schedule = make_schedule("warmup_scaled", 0.1, warmup_steps=4, workers=2)
    copy = pickle.loads(pickle.dumps(schedule))
    assert copy == schedule and copy(2, 0) == schedule(2, 0)
    with pytest.raises(AttributeError):
        schedule.base_lr = 1.0  # type: ignore[misc]
    assert isinstance(copy, LRSchedule) and set(SCHEDULES) == {"constant", "linear_decay", "warmup_scaled"}


@pytest.mark.parametrize("kwargs, field", [
    ({"name": "cosine", "base_lr": 0.1}, "cosine"),
    ({"name": "constant", "base_lr": -0.1}, "base_lr"),
    ({"name": "constant", "base_lr": float("nan")}, "base_lr"),
    ({"name": "linear_decay", "base_lr": 0.1, "decay_per_epoch": -1.0}, "decay_per_epoch"),
    ({"name": "warmup_scaled", "base_lr": 0.1, "warmup_steps": -1}, "warmup_steps"),
    ({"name": "warmup_scaled", "base_lr": 0.1, "warmup_steps": 2.5}, "warmup_steps"),
    ({"name": "warmup_scaled", "base_lr": 0.1, "workers": 0}, "workers"),
    ({"name": "constant", "base_lr": 0.1, "min_lr": 0.2}, "min_lr"),
    ({"name": "constant", "base_lr": 0.1, "decay_per_epoch": 0.01}, "decay_per_epoch"),
    ({"name": "linear_decay", "base_lr": 0.1, "warmup_steps": 5}, "warmup_steps"),
    ({"name": "linear_decay", "base_lr": 0.1, "decay_updates": -1}, "decay_updates"),
    ({"name": "linear_decay", "base_lr": 0.1, "decay_updates": 1.5}, "decay_updates"),
    ({"name": "constant", "base_lr": 0.1, "decay_updates": 100}, "decay_updates"),
])
def test_invalid_values_are_rejected_naming_the_field(kwargs, field):
    name, base_lr = kwargs.pop("name"), kwargs.pop("base_lr")
    with pytest.raises(ValueError, match=field):
        make_schedule(name, base_lr, **kwargs)


def test_negative_step_or_epoch_is_rejected():
    with pytest.raises(ValueError, match="step"):
        make_schedule("constant", 0.1)(-1, 0)
    with pytest.raises(ValueError, match="epoch"):
        make_schedule("constant", 0.1)(0, -1)
