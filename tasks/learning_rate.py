"""A task's learning-rate rule, in one place: the default rate for a task and optimizer, the default linear decay,
which `hogwild` schedule a run gets, and that schedule's floor. `tasks.options` (run.py and the reproduction
scripts) and `scripts/train_serial.py` both call it, so a run of either picks the same schedule from the same flags.

Usage: `config = hogwild.Config(lr=0.03, **schedule_fields("pos", "sgd", 0.03))`
       # -> lr_schedule "linear_decay", decay_per_epoch 0.0135, warmup_steps 0, min_lr 0.0003
"""
from __future__ import annotations

import math
from typing import Any

PAPER_POS_SGD_DECAY = 0.0135  # the Hogwild POS tagger: SGD 0.03, minus 0.0135 after each epoch
DECAY_FLOOR = 0.01  # a linear decay stops at 1% of the starting rate (it would reach 0 after ~2.2 paper epochs)
_PLAIN_SGD_LR = {"pos": 0.03, "nmt": 0.1}  # the papers' SGD rates
_MOMENTUM_LR = {"pos": 0.01, "nmt": 0.03}
_ADAPTIVE_LR = {"adam": 1e-3, "adamax": 2e-3, "rmsprop": 1e-3, "adagrad": 0.05, "adadelta": 1.0}  # torch's usual


def default_lr(task: str, optimizer: str) -> float:
    """POS paper: SGD 0.03; NMT paper: SGD 0.1; momentum SGD a third of that; adaptive optimizers: their usual rate."""
    if optimizer == "sgd":
        return _PLAIN_SGD_LR[task]
    if optimizer in ("msgd", "nesterov"):
        return _MOMENTUM_LR[task]
    return _ADAPTIVE_LR[optimizer]


def default_lr_decay(task: str, optimizer: str, warmup_steps: int = 0) -> float:
    """The paper's linear decay for POS with plain SGD; none otherwise (and none under a warm-up, which replaces it)."""
    return PAPER_POS_SGD_DECAY if (task, optimizer, warmup_steps) == ("pos", "sgd", 0) else 0.0


def schedule_fields(task: str, optimizer: str, lr: float, lr_decay: float | None = None, warmup_steps: int = 0,
                    min_lr: float = 0.0) -> dict[str, Any]:
    """The schedule fields of `hogwild.Config` (lr_schedule, decay_per_epoch, warmup_steps, min_lr) for a run.

    lr_decay None takes `default_lr_decay`. warmup_steps > 0 gives "warmup_scaled", else a decay gives "linear_decay"
    floored at max(min_lr, lr * DECAY_FLOOR), else "constant". Conflicting values raise ValueError naming the flag.
    """
    if lr_decay is None:
        lr_decay = default_lr_decay(task, optimizer, warmup_steps)
    if not (math.isfinite(lr_decay) and lr_decay >= 0):
        raise ValueError(f"--lr-decay: must be >= 0, got {lr_decay}")
    if warmup_steps and lr_decay:
        raise ValueError(f"--lr-decay: {lr_decay} cannot be combined with --warmup-steps {warmup_steps} (one schedule "
                         "per run: give --lr-decay 0 or --warmup-steps 0)")
    if not (math.isfinite(min_lr) and 0.0 <= min_lr <= lr):
        raise ValueError(f"--min-lr: must be in [0, --lr] = [0, {lr}], got {min_lr}")
    if warmup_steps:
        return {"lr_schedule": "warmup_scaled", "decay_per_epoch": 0.0, "warmup_steps": warmup_steps,
                "min_lr": min_lr}
    if lr_decay:
        return {"lr_schedule": "linear_decay", "decay_per_epoch": lr_decay, "warmup_steps": 0,
                "min_lr": max(min_lr, lr * DECAY_FLOOR)}
    return {"lr_schedule": "constant", "decay_per_epoch": 0.0, "warmup_steps": 0, "min_lr": min_lr}
