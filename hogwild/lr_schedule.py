"""Learning-rate schedules: a picklable function of (global step, epoch) that workers evaluate each update.

Serves step 3 of `hogwild.train` (spawn): every worker builds its own from the run's Config (`Config.schedule()`).

Usage: `schedule = make_schedule("linear_decay", 0.03, decay_per_epoch=0.0135)`; `lr = schedule(step, epoch)`.

- "constant":      base_lr.
- "linear_decay":  base_lr - decay_per_epoch * epoch, floored at min_lr (the Hogwild POS tagger: 0.03, minus
                   0.0135 after each epoch). With decay_updates=N the decay is counted in updates instead of epochs:
                   base_lr - decay_per_epoch * step / N, i.e. the same decay spread evenly over every N global
                   updates, so its pace no longer depends on the corpus size (the paper's epoch was ~40k sentences
                   of TIGER, one sentence per update: decay_updates=40_000 keeps its rate on any corpus).
- "warmup_scaled": linear warm-up from base_lr to base_lr * workers over the first warmup_steps global steps,
                   then constant (the AD-PSGD large-batch recipe: scale lr linearly with the number of learners).
min_lr floors every schedule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("constant", "linear_decay", "warmup_scaled")


@dataclass(frozen=True)
class LRSchedule:
    """A learning-rate schedule; `schedule(step, epoch) -> lr`. Frozen and picklable (workers get a copy)."""

    name: str  # one of SCHEDULES
    base_lr: float  # lr at step 0, epoch 0
    decay_per_epoch: float = 0.0  # "linear_decay": subtracted once per completed epoch (or per decay_updates)
    warmup_steps: int = 0  # "warmup_scaled": global steps to ramp from base_lr to base_lr * workers
    workers: int = 1  # "warmup_scaled": the number of workers the lr is scaled by
    min_lr: float = 0.0  # floor for every schedule
    decay_updates: int = 0  # "linear_decay": 0 -> decay per completed epoch; N -> decay_per_epoch per N updates

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.name!r}; expected one of {', '.join(SCHEDULES)}")
        for field in ("base_lr", "decay_per_epoch", "min_lr"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"schedule {self.name!r}: {field} must be a finite number >= 0, got {value!r}")
        for field in ("warmup_steps", "workers", "decay_updates"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if field == "workers" else 0):
                raise ValueError(f"schedule {self.name!r}: {field} must be an integer >= "
                                 f"{1 if field == 'workers' else 0}, got {value!r}")
        if self.min_lr > self.base_lr:
            raise ValueError(f"schedule {self.name!r}: min_lr ({self.min_lr}) exceeds base_lr ({self.base_lr})")
        # Options another schedule would silently ignore are refused: the run would not do what was asked.
        if self.decay_per_epoch and self.name != "linear_decay":
            raise ValueError(f"schedule {self.name!r}: decay_per_epoch={self.decay_per_epoch} only applies to "
                             "'linear_decay'")
        if self.decay_updates and self.name != "linear_decay":
            raise ValueError(f"schedule {self.name!r}: decay_updates={self.decay_updates} only applies to "
                             "'linear_decay'")
        if self.warmup_steps and self.name != "warmup_scaled":
            raise ValueError(f"schedule {self.name!r}: warmup_steps={self.warmup_steps} only applies to "
                             "'warmup_scaled'")

    def __call__(self, step: int, epoch: int) -> float:
        """The lr for global update `step` (0-based) in `epoch` (0-based)."""
        if step < 0 or epoch < 0:
            raise ValueError(f"step and epoch must be >= 0, got step={step}, epoch={epoch}")
        if self.name == "linear_decay":
            elapsed = step / self.decay_updates if self.decay_updates else epoch
            lr = self.base_lr - self.decay_per_epoch * elapsed
        elif self.name == "warmup_scaled":
            peak = self.base_lr * self.workers
            lr = peak if step >= self.warmup_steps else \
                self.base_lr + (peak - self.base_lr) * step / self.warmup_steps
        else:
            lr = self.base_lr
        return max(lr, self.min_lr)


def make_schedule(name: str, base_lr: float, *, decay_per_epoch: float = 0.0, warmup_steps: int = 0,
                  workers: int = 1, min_lr: float = 0.0, decay_updates: int = 0) -> LRSchedule:
    """Build a validated LRSchedule; invalid values raise ValueError naming the field."""
    return LRSchedule(name, base_lr, decay_per_epoch, warmup_steps, workers, min_lr, decay_updates)
