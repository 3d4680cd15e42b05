"""What one `run.py` training run is asked to do: a typed, validated dataclass, and its translation into the engine's
`hogwild.Config` and the MPI module's `DistConfig`.

Usage: `options = RunOptions(task="pos", workers=2, time_limit=60); config = options.engine_config(devices)`

Every value has a default; `None` defaults are filled per task, recipe and optimizer by `resolved()` (e.g. NMT: batch
64, gradient clipping 1.0). The recipe (`tasks.recipes`: 'default', or 'paper', which --preset paper implies) picks
the optimizer (default: POS SGD, NMT Adam; paper: SGD) and the POS word vocabulary (words seen twice; paper: 10
times); the learning rate, its decay and the schedule come from `tasks.learning_rate` (POS with SGD: lr 0.1 decaying
by 0.0225 per 40,000 updates; paper: lr 0.03 and the linear decay of 0.0135 per epoch).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from hogwild.config import MODES, Config
from hogwild.data.readers import FORMATS, TAGS
from hogwild.data.subwords import MODEL_TYPES as SUBWORDS
from hogwild.multihost.config import ALGORITHMS, DistConfig
from hogwild.shared_optim import FUSED_OPTIMIZERS, OPTIMIZERS
from hogwild.tasks.devices import CPU_WORKERS
from hogwild.tasks.learning_rate import default_lr, default_lr_decay, schedule_fields
from hogwild.tasks.recipes import default_optimizer, default_word_min_freq, resolve_recipe

TASKS = ("pos", "nmt")
PRESETS = ("small", "paper")

# Per-task defaults used when a flag is left at None (paper values where the paper gives one).
_TASK_DEFAULTS = {
    "pos": {"batch_size": 1, "clip_norm": None, "eval_sentences": None},
    "nmt": {"batch_size": 64, "clip_norm": 1.0, "eval_sentences": 500},
}
_SYNTHETIC_BATCH = {"pos": 1, "nmt": 32}


def _fail(flag: str, message: str) -> None:
    raise ValueError(f"--{flag}: {message}")


@dataclass
class RunOptions:
    """One training run. Field names match the command-line flags (`--time-limit` -> time_limit)."""

    task: str = "pos"  # 'pos' (char-BiLSTM tagger) or 'nmt' (attention GRU translator)
    gpus: int = 0  # one worker per GPU (cuda:0 .. cuda:N-1); 0 -> CPU workers
    workers: int = 2  # CPU worker processes (ignored with --gpus)
    workers_per_gpu: int = 1  # with --gpus: workers sharing each GPU
    mode: str = "hogwild"  # 'hogwild' | 'sync' | 'single'
    preset: str = "small"  # model size: 'small' (CPU) or 'paper'
    recipe: str | None = None  # 'default' | 'paper' (tasks.recipes); None: 'paper' with --preset paper, else 'default'
    # --- data (no --train: the built-in synthetic task) ---
    train: list[str] | None = None  # POS: tagged files/folders; NMT: file prefixes (PREFIX.src, PREFIX.tgt)
    dev: str | None = None  # held-out set (None: a seeded split of train)
    test: str | None = None  # scored once at the end with the best checkpoint
    format: str = "auto"
    word_column: int | None = None  # 1-based CoNLL columns
    tag_column: int | None = None
    tag: str | None = None  # 'upos' | 'xpos' | 'xpos+feats' (None: the format's main tag)
    separator: str = "/"  # slash-tagged text: word and tag split at the last separator (word_TAG corpora: "_")
    src_lang: str = "fr"
    tgt_lang: str = "en"
    encoding: str = "utf-8"
    train_limit: int | None = None  # NMT: read only the first N training pairs
    dev_limit: int | None = None  # evaluate on the first N held-out sentences only (faster evaluations)
    eval_sentences: int | None = None  # periodic checks score a seeded sample of this many of them, the final
    #                                    evaluation all (None: NMT 500 - greedy decoding is slow -, POS all)
    max_len: int = 50  # NMT: drop training pairs longer than this (paper: 50)
    vocab_size: int = 15000  # NMT: words per side (paper: 15,000)
    subwords: str | None = None  # NMT: None (Moses words) | 'bpe' | 'unigram' (sentencepiece, trained on train)
    subword_vocab_size: int = 8000  # NMT with --subwords: pieces per side (a soft limit on small corpora)
    synthetic_size: int | None = None  # sentences/pairs of the synthetic task (default 2000 / 5000)
    word_min_freq: int | None = None  # POS: words seen fewer times are unk (recipe: default 2, paper 10)
    # --- optimisation ---
    optimizer: str | None = None  # None: the recipe's (default: pos sgd, nmt adam; paper: sgd)
    lr: float | None = None
    lr_decay: float | None = None  # linear decay per epoch or per decay_updates (POS + SGD: the recipe's)
    decay_updates: int | None = None  # the decay's unit in updates (None: the recipe's, default 40,000; paper: epoch)
    warmup_steps: int = 0  # > 0: the warmup_scaled schedule (lr -> lr * workers)
    min_lr: float = 0.0
    momentum: float | None = None  # msgd / nesterov momentum (default 0.9)
    clip_norm: float | None = None  # NMT default 1.0 (paper)
    batch_size: int | None = None  # POS 1 sentence, NMT 64 pairs (synthetic NMT 32)
    dropout: float = 0.0
    # --- when to stop and evaluate ---
    epochs: int | None = None
    steps: int | None = None
    time_limit: float | None = None
    eval_every: int | None = None  # updates between evaluations
    eval_every_seconds: float | None = None
    eval_budget: float = 0.1  # periodic evaluations: at most this share of the wall time (0: no cap; Config's default)
    patience: int | None = None
    beam: int = 5  # NMT: beam size of the final held-out translations (evaluations during training are greedy)
    # --- engine ---
    data_assignment: str = "queue"
    threads_per_worker: int = 1
    amp: str | None = None  # 'bf16': forward under torch.autocast(bfloat16); parameters and state stay fp32
    fused_step: bool = False  # torch's fused CPU optimizer kernel on CPU workers too (GPU workers always use it)
    cpu_workers: str | None = None  # 'in-place' | 'replica' (tasks.devices); None: default_cpu_workers()
    checkpoint_every: int | None = None
    log_every: int | None = None
    seed: int = 0
    out: str | None = None  # run directory (default runs/<task>-<date>-<time>)
    resume: bool = False
    progress: bool = True
    # --- multi-host (MPI) ---
    distributed: str | None = None  # None: one host; else the algorithm (run under mpiexec)
    servers: int = DistConfig.servers  # the MPI module's defaults (multihost_config never imports mpi4py)
    period: int = DistConfig.period
    n_push: int = DistConfig.n_push
    n_fetch: int = DistConfig.n_fetch
    alpha: float = DistConfig.alpha
    tester: bool = DistConfig.tester
    shard_data: bool = DistConfig.shard_data
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes (reproduction scripts label runs)

    def __post_init__(self) -> None:
        for name, choices in (("task", TASKS), ("mode", MODES), ("preset", PRESETS), ("format", FORMATS)):
            if getattr(self, name) not in choices:
                _fail(name, f"must be one of {', '.join(choices)}; got {getattr(self, name)!r}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            _fail("optimizer", f"must be one of {', '.join(OPTIMIZERS)}; got {self.optimizer!r}")
        recipe = resolve_recipe(self.recipe, self.preset)  # an unknown recipe fails here, naming --recipe
        optimizer = self.optimizer or default_optimizer(self.task, recipe, self.distributed)
        if self.tag is not None and self.tag not in TAGS:
            _fail("tag", f"must be one of {', '.join(TAGS)}; got {self.tag!r}")
        if self.distributed is not None and self.distributed not in ALGORITHMS:
            _fail("distributed", f"must be one of {', '.join(ALGORITHMS)}; got {self.distributed!r}")
        for name in ("gpus",):
            if getattr(self, name) < 0:
                _fail(name, f"must be >= 0, got {getattr(self, name)}")
        for name in ("workers", "workers_per_gpu", "max_len", "vocab_size", "beam", "threads_per_worker", "servers",
                     "period", "n_push", "n_fetch"):
            if getattr(self, name) < 1:
                _fail(name.replace("_", "-"), f"must be >= 1, got {getattr(self, name)}")
        for name in ("word_column", "tag_column", "train_limit", "dev_limit", "eval_sentences", "synthetic_size",
                     "batch_size", "epochs", "steps", "eval_every", "patience", "checkpoint_every", "log_every",
                     "word_min_freq", "decay_updates"):
            value = getattr(self, name)
            if value is not None and value < 1:
                _fail(name.replace("_", "-"), f"must be >= 1, got {value}")
        for name in ("lr", "time_limit", "eval_every_seconds", "clip_norm"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                _fail(name.replace("_", "-"), f"must be a positive number, got {value}")
        for name in ("lr_decay", "min_lr", "warmup_steps"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                _fail(name.replace("_", "-"), f"must be >= 0, got {value}")
        if not (math.isfinite(self.eval_budget) and 0 <= self.eval_budget <= 1):
            _fail("eval-budget", f"is a share of the wall time, in [0, 1]; got {self.eval_budget}")
        if self.momentum is not None and not 0.0 <= self.momentum < 1.0:
            _fail("momentum", f"must be in [0, 1), got {self.momentum}")
        if not 0.0 <= self.dropout < 1.0:
            _fail("dropout", f"must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.alpha < 1.0:
            _fail("alpha", f"must be in (0, 1), got {self.alpha}")
        schedule = schedule_fields(self.task, optimizer, self.lr or default_lr(self.task, optimizer, recipe),
                                   self.lr_decay, self.warmup_steps, self.min_lr, recipe,
                                   self.decay_updates)  # conflicting schedule flags fail here, naming the flag
        if self.decay_updates is not None and schedule["lr_schedule"] != "linear_decay":
            _fail("decay-updates", f"sets the unit of a linear decay, but this run's schedule is "
                                   f"{schedule['lr_schedule']!r} (give --lr-decay > 0)")
        if self.subwords is not None and self.subwords not in SUBWORDS:
            _fail("subwords", f"must be one of {', '.join(SUBWORDS)}; got {self.subwords!r}")
        if self.subwords is not None and self.task != "nmt":
            _fail("subwords", "applies to --task nmt only")
        if self.subwords is not None and self.synthetic:
            _fail("subwords", "needs --train text (the synthetic task has no text to cut into pieces)")
        if self.subword_vocab_size < 8:
            _fail("subword-vocab-size", f"must be >= 8, got {self.subword_vocab_size}")
        if self.task == "nmt" and self.word_min_freq is not None:
            _fail("word-min-freq", "applies to --task pos only (NMT keeps the --vocab-size most frequent words)")
        if self.src_lang == self.tgt_lang:
            _fail("tgt-lang", f"must differ from --src-lang (both are {self.src_lang!r})")
        if self.task == "nmt" and (self.word_column or self.tag_column or self.tag):
            _fail("task", "--word-column, --tag-column and --tag apply to --task pos only")
        if not self.separator or any(c.isspace() for c in self.separator):
            _fail("separator", f"must be a non-empty string without spaces, got {self.separator!r}")
        if self.distributed == "eamsgd" and optimizer not in ("msgd", "nesterov"):
            _fail("optimizer", f"--distributed eamsgd needs a momentum optimizer (msgd or nesterov), got "
                               f"{optimizer!r}; use --distributed easgd for plain SGD")
        if self.cpu_workers is not None and self.cpu_workers not in CPU_WORKERS:
            _fail("cpu-workers", f"must be one of {', '.join(CPU_WORKERS)}; got {self.cpu_workers!r}")
        if self.fused_step and optimizer not in FUSED_OPTIMIZERS:
            _fail("fused-step", f"torch has a fused CPU kernel only for {', '.join(FUSED_OPTIMIZERS)}, not "
                                f"{optimizer!r}")
        if self.resume and not self.out:
            _fail("resume", "needs --out DIR (the run directory to continue)")
        if self.mode == "sync" and self.data_assignment != "queue":
            _fail("data-assignment", "--mode sync deals batches in lockstep; use --data-assignment queue")
        if self.train:
            for path in self.train:
                _check_exists("train", path, self.task)
        for name in ("dev", "test"):
            if getattr(self, name):
                _check_exists(name, getattr(self, name), self.task)

    @property
    def synthetic(self) -> bool:
        return not self.train

    def resolved(self) -> "RunOptions":
        """A copy with every task-dependent default filled in (what config.json records)."""
        values = dataclasses.asdict(self)
        recipe = values["recipe"] = resolve_recipe(self.recipe, self.preset)
        optimizer = values["optimizer"] = self.optimizer or default_optimizer(self.task, recipe, self.distributed)
        if values["word_min_freq"] is None and self.task == "pos":
            values["word_min_freq"] = default_word_min_freq(recipe, self.synthetic)
        if values["batch_size"] is None:
            values["batch_size"] = _SYNTHETIC_BATCH[self.task] if self.synthetic else _TASK_DEFAULTS[self.task][
                "batch_size"]
        if values["clip_norm"] is None:
            values["clip_norm"] = _TASK_DEFAULTS[self.task]["clip_norm"]
        if values["eval_sentences"] is None:
            values["eval_sentences"] = _TASK_DEFAULTS[self.task]["eval_sentences"]
        if values["lr"] is None:
            values["lr"] = default_lr(self.task, optimizer, recipe)
        if values["lr_decay"] is None:
            values["lr_decay"] = default_lr_decay(self.task, optimizer, self.warmup_steps, recipe)
        values["decay_updates"] = schedule_fields(self.task, optimizer, values["lr"], values["lr_decay"],
                                                  self.warmup_steps, self.min_lr, recipe,
                                                  self.decay_updates)["decay_updates"]
        if values["cpu_workers"] is None:
            values["cpu_workers"] = default_cpu_workers(self.task, self.mode, self.workers)
        if values["steps"] is None and values["epochs"] is None and values["time_limit"] is None:
            values["epochs"] = 2 if self.synthetic else 1  # the default job: about a minute on 2 CPU workers
        if values["log_every"] is None:
            values["log_every"] = 50 if self.task == "pos" else 10
        if values["eval_every"] is None and values["eval_every_seconds"] is None:
            if self.synthetic:
                values["eval_every"] = 250  # 8 evaluations per epoch of the default job, however fast the machine
            else:
                values["eval_every_seconds"] = 60.0
        return RunOptions(**values)

    def optimizer_args(self) -> dict[str, Any]:
        if self.optimizer in ("msgd", "nesterov") and self.momentum is not None:
            return {"momentum": self.momentum}
        return {}

    def engine_config(self, devices: list[str], best_metric: str) -> Config:
        """The hogwild.Config of this run (call on a `resolved()` copy).

        sparse_pull: a POS device worker ('cuda:N', 'cpu-replica') pulls only the embedding rows its sentence holds,
        not the whole word table, before every step ('cpu' workers train in place and pull nothing). The tagger
        embeds only its batch's ids, so the arithmetic is the same (tests/tasks/test_pos.py). NMT's embeddings are
        dense, and sync mode averages whole tables (Config refuses it there)."""
        return Config(
            devices=devices, mode=self.mode, threads_per_worker=self.threads_per_worker, optimizer=self.optimizer,
            lr=self.lr, optimizer_args=self.optimizer_args(),
            **schedule_fields(self.task, self.optimizer, self.lr, self.lr_decay, self.warmup_steps, self.min_lr,
                              self.recipe, self.decay_updates),
            clip_norm=self.clip_norm, max_steps=self.steps, epochs=self.epochs, time_limit=self.time_limit,
            eval_every=self.eval_every, eval_every_seconds=self.eval_every_seconds, eval_budget=self.eval_budget or None,
            best_metric=best_metric,
            best_mode="max", patience=self.patience, checkpoint_dir=self.out, resume=self.resume,
            checkpoint_every=self.checkpoint_every, log_every=self.log_every, progress=self.progress,
            seed=self.seed, data_assignment=self.data_assignment, amp=self.amp,
            fused_step=True if self.fused_step else None,  # None: the engine's choice (on for GPU workers)
            sparse_pull=self.task == "pos" and self.mode != "sync")

    def dist_config(self):
        """The MPI module's DistConfig for these options."""
        return DistConfig(algorithm=self.distributed, servers=self.servers, period=self.period, n_push=self.n_push,
                          n_fetch=self.n_fetch, alpha=self.alpha, tester=self.tester, shard_data=self.shard_data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_cpu_workers(task: str, mode: str, workers: int) -> str:
    """How CPU workers train unless --cpu-workers says: NMT Hogwild workers on replicas, the rest in place.

    NMT (Europarl, Adam, 2 workers, 2026-11-25, docs/benchmarks.md): in place, the other worker's Adam update (every
    weight moves) lands in the middle of a ~1 s step, and held-out loss per update trailed 1 worker by 0.02-0.13
    nats over two seeds to 1,200 updates; on replicas it was level with or ahead of 1 worker, at the same updates/s
    (the copy is ~1% of a step). POS (SGD, one sentence, ~7 ms a step): in place is level with 1 worker per update and makes as
    many updates/s as 2 unrelated runs, while replicas made 19% fewer (each step copies the 0.85M dense weights in
    and their gradients out; 31% before they pulled only the sentence's embedding rows). Sync and single workers see
    no update mid-step."""
    return "replica" if task == "nmt" and mode == "hogwild" and workers > 1 else "in-place"


def _check_exists(flag: str, path: str, task: str) -> None:
    """POS corpora are files or folders; NMT corpora are prefixes (PREFIX.fr / PREFIX.fr.xz exist)."""
    if task == "pos" or os.path.exists(path):
        if not os.path.exists(path):
            _fail(flag, f"{path} does not exist")
        return
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    if not os.path.isdir(folder) or not any(name.startswith(base + ".") for name in os.listdir(folder)):
        _fail(flag, f"no file {path}.<lang>[.xz|.gz|.bz2] found (NMT corpora are given as prefixes, e.g. "
                    f"europarl-fr-en/train for train.fr + train.en)")
