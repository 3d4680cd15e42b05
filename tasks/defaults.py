"""A run's defaults, in one place: the recipes ('default', what an experienced user picks for an unknown corpus, and
'paper', the Hogwild papers' settings exactly), the learning-rate rule, the per-task values and the CPU-worker choice.
`RunOptions.resolved()` fills every option left unset from here, once per run (`fill_defaults`); `run.py --help`
shows these values through the `*_TEXT` descriptions, which are generated from the same tables. Any flag given on
the command line overrides them; config.json and summary.json record what was used.

Usage: `recipe = resolve_recipe(None, "small")  # -> "default"`; `default_lr("pos", "sgd", recipe)  # -> 0.1`;
`config = hogwild.Config(lr=0.1, **schedule_fields("pos", "sgd", 0.1))`
"""
from __future__ import annotations

from typing import Any

from hogwild.data.pos_dataset import PAPER_WORD_MIN_FREQ, SYNTHETIC_WORD_MIN_FREQ, WORD_MIN_FREQ
from hogwild.shared_optim import MOMENTUM_OPTIMIZERS, OPTIMIZERS

TASKS = ("pos", "nmt")
METRICS = {"pos": "accuracy", "nmt": "bleu"}  # the held-out metric that picks a task's best checkpoint
RECIPES = ("default", "paper")

# --- the recipes: optimizer and vocabulary (measurements behind them: docs/benchmarks.md) ---
_RECIPE_OPTIMIZER = {("default", "pos"): "sgd", ("default", "nmt"): "adam", ("paper", "pos"): "sgd",
                     ("paper", "nmt"): "sgd"}

# --- the learning-rate rule ---
PAPER_POS_SGD_DECAY = 0.0135  # the Hogwild POS tagger: SGD 0.03, minus 0.0135 after each epoch
DECAY_FLOOR = 0.01  # a linear decay stops at 1% of the starting rate (it would reach 0 after ~2.2 paper epochs)
# The default recipe counts its decay in updates, not epochs: the paper's epoch was ~40k sentences, so on a small
# treebank its per-epoch decay reached the floor within a few epochs; per DECAY_UPDATES updates it keeps one pace.
DECAY_UPDATES = 40_000
DEFAULT_POS_SGD_LR = 0.1
DEFAULT_POS_SGD_DECAY = 0.0225  # per DECAY_UPDATES updates: half the paper's pace relative to its rate
_PLAIN_SGD_LR = {"pos": 0.03, "nmt": 0.1}  # the papers' SGD rates
_MOMENTUM_LR = {"pos": 0.01, "nmt": 0.03}  # a third of the paper's rate
_ADAPTIVE_LR = {"adam": 1e-3, "adamax": 2e-3, "rmsprop": 1e-3, "adagrad": 0.05, "adadelta": 1.0}  # torch's usual


def check_rates(optimizers: tuple[str, ...]) -> None:
    """Every optimizer of hogwild/shared_optim.py has a default rate here: a new one is named at once."""
    missing = [name for name in optimizers if name not in ("sgd", *MOMENTUM_OPTIMIZERS, *_ADAPTIVE_LR)]
    if missing:
        raise ImportError(f"tasks/defaults.py: no default learning rate for optimizer {', '.join(missing)} of "
                          f"hogwild/shared_optim.py's OPTIMIZERS; add its usual rate to _ADAPTIVE_LR")


check_rates(OPTIMIZERS)

# --- per-task values (the paper's where it gives one) ---
TASK_DEFAULTS = {
    "pos": {"batch_size": 1, "synthetic_batch_size": 1, "clip_norm": None, "eval_sentences": None,
            "log_every": 50, "synthetic_size": 2000, "synthetic_epochs": 1},
    "nmt": {"batch_size": 64, "synthetic_batch_size": 32, "clip_norm": 1.0, "eval_sentences": 500,
            "log_every": 10, "synthetic_size": 5000, "synthetic_epochs": 2},
}
# when no --steps, --epochs or --time-limit: EPOCHS on a corpus, a task's "synthetic_epochs" above on its synthetic
# task (the default job, pos: 2,000 updates, about 20 seconds of training on 2 CPU cores)
EPOCHS = 1
SYNTHETIC_EVAL_EVERY = 250  # updates: 8 evaluations per epoch of the default job, however fast the machine
EVAL_EVERY_SECONDS = 60.0  # real corpora
# nmt with --compile, --length-bucket's default: a Europarl epoch's target lengths fall into 7 buckets, not 47 (how a
# run's batches are padded, and the edges of graphed and compiled runs: data/buckets.py's training_buckets)
COMPILED_LENGTH_BUCKET = 8


def resolve_recipe(recipe: str | None, preset: str) -> str:
    """The recipe of a run: as given, else 'paper' with the paper's model sizes (--preset paper is the paper's
    setting, whole) and 'default' otherwise (RunOptions checks a recipe given)."""
    if recipe is None:
        return "paper" if preset == "paper" else "default"
    return recipe


def default_optimizer(task: str, recipe: str, distributed: str | None = None) -> str:
    """The recipe's optimizer; EAMSGD (--distributed eamsgd) needs momentum: msgd."""
    return "msgd" if distributed == "eamsgd" else _RECIPE_OPTIMIZER[recipe, task]


def default_word_min_freq(recipe: str, synthetic: bool = False) -> int:
    """POS: words seen fewer times become unk (default 2; the paper's 10 was sized for 40k training sentences). The
    synthetic task keeps its own threshold: its words are drawn to be tagged from their characters."""
    if synthetic:
        return SYNTHETIC_WORD_MIN_FREQ
    return PAPER_WORD_MIN_FREQ if recipe == "paper" else WORD_MIN_FREQ


def default_lr(task: str, optimizer: str, recipe: str = "default") -> float:
    """POS paper: SGD 0.03 (default recipe 0.1); NMT paper: SGD 0.1; momentum SGD a third of the paper's rate;
    adaptive optimizers: their usual rate."""
    if optimizer == "sgd":
        return DEFAULT_POS_SGD_LR if (task, recipe) == ("pos", "default") else _PLAIN_SGD_LR[task]
    if optimizer in MOMENTUM_OPTIMIZERS:
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


def default_cpu_workers(task: str, mode: str, workers: int) -> str:
    """How CPU workers train unless --cpu-workers says: NMT Hogwild workers on replicas (Adam moves every weight at
    every update, and a step is long enough for the other worker's update to land in its middle), the rest in place
    (a POS step is short and touches a few rows; a replica's copy of the dense weights costs more than it gains).
    Sync and single workers see no update mid-step."""
    return "replica" if task == "nmt" and mode == "hogwild" and workers > 1 else "in-place"


def schedule_fields(task: str, optimizer: str, lr: float, lr_decay: float | None = None, warmup_steps: int = 0,
                    min_lr: float = 0.0, recipe: str = "default", decay_updates: int | None = None) -> dict[str, Any]:
    """The schedule fields of `hogwild.Config` (lr_schedule, decay_per_epoch, decay_updates, warmup_steps, min_lr)
    for a run's flags; Config checks the values.

    lr_decay None takes `default_lr_decay`; decay_updates None the recipe's unit (`default_decay_updates`).
    warmup_steps > 0 gives "warmup_scaled", else a decay gives "linear_decay" floored at max(min_lr, lr *
    DECAY_FLOOR), else "constant" (a decay_updates given there is passed on, and Config refuses it). A decay and a
    warm-up together raise ValueError naming both flags: they pick the schedule.
    """
    if lr_decay is None:
        lr_decay = default_lr_decay(task, optimizer, warmup_steps, recipe)
    if warmup_steps and lr_decay:
        raise ValueError(f"--lr-decay: {lr_decay} cannot be combined with --warmup-steps {warmup_steps} (one schedule "
                         "per run: give --lr-decay 0 or --warmup-steps 0)")
    if warmup_steps:
        return {"lr_schedule": "warmup_scaled", "decay_per_epoch": 0.0, "decay_updates": decay_updates,
                "warmup_steps": warmup_steps, "min_lr": min_lr}
    if lr_decay:
        return {"lr_schedule": "linear_decay", "decay_per_epoch": lr_decay,
                "decay_updates": default_decay_updates(recipe) if decay_updates is None else decay_updates,
                "warmup_steps": 0, "min_lr": max(min_lr, lr * DECAY_FLOOR)}
    return {"lr_schedule": "constant", "decay_per_epoch": 0.0, "decay_updates": decay_updates, "warmup_steps": 0,
            "min_lr": min_lr}


def fill_defaults(options) -> dict[str, Any]:
    """The values of a `RunOptions` that were left unset (None), each filled from this module: what
    `RunOptions.resolved()` replaces."""
    task, synthetic = options.task, options.synthetic
    recipe = resolve_recipe(options.recipe, options.preset)
    optimizer = options.optimizer or default_optimizer(task, recipe, options.distributed)
    per_task = TASK_DEFAULTS[task]
    lr = default_lr(task, optimizer, recipe) if options.lr is None else options.lr
    lr_decay = default_lr_decay(task, optimizer, options.warmup_steps, recipe) if options.lr_decay is None \
        else options.lr_decay
    values: dict[str, Any] = {
        "recipe": recipe, "optimizer": optimizer, "lr": lr, "lr_decay": lr_decay,
        "decay_updates": options.decay_updates,
        "batch_size": per_task["synthetic_batch_size" if synthetic else "batch_size"],
        "clip_norm": per_task["clip_norm"], "eval_sentences": per_task["eval_sentences"],
        "log_every": per_task["log_every"],
        "synthetic_size": per_task["synthetic_size"] if synthetic else None,
        "word_min_freq": default_word_min_freq(recipe, synthetic) if task == "pos" else None,
        "cpu_workers": default_cpu_workers(task, options.mode, options.workers),
        "length_bucket": (COMPILED_LENGTH_BUCKET if options.compile != "off" else 1) if task == "nmt" else None,
    }
    if options.decay_updates is None and lr_decay and not options.warmup_steps:
        values["decay_updates"] = default_decay_updates(recipe)  # the unit of this run's linear decay
    if options.steps is None and options.epochs is None and options.time_limit is None:
        values["epochs"] = per_task["synthetic_epochs"] if synthetic else EPOCHS
    if options.eval_every is None and options.eval_every_seconds is None:
        values["eval_every" if synthetic else "eval_every_seconds"] = SYNTHETIC_EVAL_EVERY if synthetic \
            else EVAL_EVERY_SECONDS
    return {name: value for name, value in values.items() if getattr(options, name) is None}


# --- the defaults as `run.py --help` shows them, generated from the tables above ---

def _per_task(value_of) -> str:
    """'V' when the value is the same everywhere, else 'pos V (paper W), nmt X'."""
    cells = {task: [value_of(task, recipe) for recipe in RECIPES] for task in TASKS}
    if len({v for values in cells.values() for v in values}) == 1:
        return _shown(cells[TASKS[0]][0])
    return ", ".join(f"{task} {_shown(values[0])}" + (f" (paper {_shown(values[1])})" if values[1] != values[0]
                                                      else "") for task, values in cells.items())


def _shown(value: Any) -> str:
    return "off" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _task_values(key: str) -> str:
    return ", ".join(f"{task} {_shown(TASK_DEFAULTS[task][key])}" for task in TASKS)


RECIPE_TEXT = "paper with --preset paper, else default"
OPTIMIZER_TEXT = (f"the recipe's: {_per_task(lambda task, recipe: _RECIPE_OPTIMIZER[recipe, task])}; msgd with "
                  "--distributed eamsgd, which needs momentum")
LR_TEXT = ("the recipe optimizer's: " + _per_task(lambda t, r: default_lr(t, _RECIPE_OPTIMIZER[r, t], r)) +
           "; with --optimizer: " + "; ".join(f"{name} {_per_task(lambda t, r: default_lr(t, name, r))}"
                                              for name in OPTIMIZERS))
LR_DECAY_TEXT = (f"pos with sgd {DEFAULT_POS_SGD_DECAY:g} per {DECAY_UPDATES} updates (paper recipe "
                 f"{PAPER_POS_SGD_DECAY:g} per epoch), else 0; a linear decay stops at {DECAY_FLOOR:.0%} of --lr")
DECAY_UPDATES_TEXT = f"{DECAY_UPDATES}; paper recipe: per epoch"
WORD_MIN_FREQ_TEXT = f"{WORD_MIN_FREQ}; paper recipe {PAPER_WORD_MIN_FREQ}, synthetic task {SYNTHETIC_WORD_MIN_FREQ}"
BATCH_SIZE_TEXT = f"{_task_values('batch_size')}; synthetic task {_task_values('synthetic_batch_size')}"
CLIP_NORM_TEXT = _task_values("clip_norm")
EVAL_SENTENCES_TEXT = _task_values("eval_sentences").replace("off", "all")
LOG_EVERY_TEXT = _task_values("log_every")
SYNTHETIC_SIZE_TEXT = _task_values("synthetic_size")
EPOCHS_TEXT = (f"on the synthetic task {_task_values('synthetic_epochs')}, else {EPOCHS}, when no --steps or "
               "--time-limit is given")
EVAL_EVERY_TEXT = (f"{SYNTHETIC_EVAL_EVERY} on the synthetic task, else --eval-every-seconds "
                   f"{EVAL_EVERY_SECONDS:g}")
LENGTH_BUCKET_TEXT = f"{COMPILED_LENGTH_BUCKET} with --compile, else 1"
CPU_WORKERS_TEXT = "replica for nmt Hogwild runs of 2+ workers, in-place otherwise"
# The engine options whose run.py default is not Config's: None until set per run (fill_defaults; --out:
# tasks.training.default_out); --help shows these words
RUN_DEFAULTS = {"optimizer": OPTIMIZER_TEXT, "lr": LR_TEXT, "lr_decay": LR_DECAY_TEXT,
                "decay_updates": DECAY_UPDATES_TEXT, "clip_norm": CLIP_NORM_TEXT, "epochs": EPOCHS_TEXT,
                "eval_every": EVAL_EVERY_TEXT, "eval_every_seconds": "see --eval-every", "log_every": LOG_EVERY_TEXT,
                "out": "runs/TASK-DATE-TIME"}
