"""A task's learning-rate rule, in one place: the default rate for a task, optimizer and recipe (`tasks.recipes`),
the default linear decay and its unit, which `hogwild` schedule a run gets, and that schedule's floor.
`tasks.options` (run.py and the reproduction scripts) and `scripts/train_serial.py` both call it, so a run of either
picks the same schedule from the same flags.

Usage: `config = hogwild.Config(lr=0.1, **schedule_fields("pos", "sgd", 0.1))`
       # -> lr_schedule "linear_decay", decay_per_epoch 0.0225, decay_updates 40000, warmup_steps 0, min_lr 0.001
       `schedule_fields("pos", "sgd", 0.03, recipe="paper")`  # the paper: 0.0135 per epoch, decay_updates None
"""
from __future__ import annotations

import math
from typing import Any

PAPER_POS_SGD_DECAY = 0.0135  # the Hogwild POS tagger: SGD 0.03, minus 0.0135 after each epoch
DECAY_FLOOR = 0.01  # a linear decay stops at 1% of the starting rate (it would reach 0 after ~2.2 paper epochs)
_PLAIN_SGD_LR = {"pos": 0.03, "nmt": 0.1}  # the papers' SGD rates
# The default recipe counts the decay in updates, not epochs: the paper's epoch was its corpus, ~40k TIGER sentences
# at one sentence per update, so on a 1.7k-sentence treebank its per-epoch decay reached the floor after 2 epochs
# (3.4k updates: ud-german-lit, UPOS, 1 worker, 65.8% dev accuracy after 17k updates and no gain after 6k). Counted per
# DECAY_UPDATES updates a decay keeps one pace on any corpus (the paper's: 45% of the starting rate per 40k sentences).
DECAY_UPDATES = 40_000
DEFAULT_POS_SGD_LR = 0.1  # measured against 0.03 at equal updates: see the figures in docs/benchmarks.md
# Per DECAY_UPDATES updates: half the paper's pace (its 0.0135 / 0.03 = 45% of the starting rate per 40k sentences).
# At the paper's pace 0.1 reached its floor at 88k updates and Brown levelled off there: 95.02% at 90k, 95.14% at
# 150k updates. At half the pace: level up to 90k (95.04%), then 95.45% at 120k and 95.83% at 150k (1 worker, seed
# 0, 1,024 dev sentences, 2026-11-26); on ud-german-lit level with the paper's pace at every check to 15k updates.
DEFAULT_POS_SGD_DECAY = 0.0225
_MOMENTUM_LR = {"pos": 0.01, "nmt": 0.03}
_ADAPTIVE_LR = {"adam": 1e-3, "adamax": 2e-3, "rmsprop": 1e-3, "adagrad": 0.05, "adadelta": 1.0}  # torch's usual


def default_lr(task: str, optimizer: str, recipe: str = "default") -> float:
    """POS paper: SGD 0.03 (default recipe 0.1); NMT paper: SGD 0.1; momentum SGD a third of the paper's rate;
    adaptive optimizers: their usual rate."""
    if optimizer == "sgd":
        return DEFAULT_POS_SGD_LR if (task, recipe) == ("pos", "default") else _PLAIN_SGD_LR[task]
    if optimizer in ("msgd", "nesterov"):
        return _MOMENTUM_LR[task]
    return _ADAPTIVE_LR[optimizer]


def default_lr_decay(task: str, optimizer: str, warmup_steps: int = 0, recipe: str = "default") -> float:
    """The linear decay for POS with plain SGD: the paper's 0.0135 per epoch, or (default recipe) 0.0225 per
    DECAY_UPDATES updates; none otherwise (and none under a warm-up, which replaces it)."""
    if (task, optimizer, warmup_steps) != ("pos", "sgd", 0):
        return 0.0
    return PAPER_POS_SGD_DECAY if recipe == "paper" else DEFAULT_POS_SGD_DECAY


def default_decay_updates(recipe: str = "default") -> int | None:
    """The decay's unit: None (per epoch, the paper) or DECAY_UPDATES updates (the default recipe)."""
    return None if recipe == "paper" else DECAY_UPDATES


def schedule_fields(task: str, optimizer: str, lr: float, lr_decay: float | None = None, warmup_steps: int = 0,
                    min_lr: float = 0.0, recipe: str = "default", decay_updates: int | None = None) -> dict[str, Any]:
    """The schedule fields of `hogwild.Config` (lr_schedule, decay_per_epoch, decay_updates, warmup_steps, min_lr)
    for a run.

    lr_decay None takes `default_lr_decay`; decay_updates None the recipe's unit (`default_decay_updates`).
    warmup_steps > 0 gives "warmup_scaled", else a decay gives "linear_decay" floored at max(min_lr, lr *
    DECAY_FLOOR), else "constant". Conflicting values raise ValueError naming the flag.
    """
    if lr_decay is None:
        lr_decay = default_lr_decay(task, optimizer, warmup_steps, recipe)
    if decay_updates is not None and (isinstance(decay_updates, bool) or not isinstance(decay_updates, int)
                                      or decay_updates < 1):
        raise ValueError(f"--decay-updates: must be an integer >= 1, got {decay_updates}")
    if not (math.isfinite(lr_decay) and lr_decay >= 0):
        raise ValueError(f"--lr-decay: must be >= 0, got {lr_decay}")
    if warmup_steps and lr_decay:
        raise ValueError(f"--lr-decay: {lr_decay} cannot be combined with --warmup-steps {warmup_steps} (one schedule "
                         "per run: give --lr-decay 0 or --warmup-steps 0)")
    if not (math.isfinite(min_lr) and 0.0 <= min_lr <= lr):
        raise ValueError(f"--min-lr: must be in [0, --lr] = [0, {lr}], got {min_lr}")
    if warmup_steps:
        return {"lr_schedule": "warmup_scaled", "decay_per_epoch": 0.0, "decay_updates": None,
                "warmup_steps": warmup_steps, "min_lr": min_lr}
    if lr_decay:
        return {"lr_schedule": "linear_decay", "decay_per_epoch": lr_decay,
                "decay_updates": decay_updates or default_decay_updates(recipe), "warmup_steps": 0,
                "min_lr": max(min_lr, lr * DECAY_FLOOR)}
    return {"lr_schedule": "constant", "decay_per_epoch": 0.0, "decay_updates": None, "warmup_steps": 0,
            "min_lr": min_lr}
