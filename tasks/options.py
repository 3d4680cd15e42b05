"""What one `run.py` training run is asked to do: `RunOptions`, where every option is declared once - name, type,
default, help, group, allowed values, the check of its value and the `hogwild.Config` field it sets. The command
line (`tasks.cli`) is generated from these declarations, and `engine_config` turns the options into the engine's
`hogwild.Config` (the object the workers receive), naming the flag when Config refuses a value.

Usage: `options = RunOptions(task="pos", workers=2, time_limit=60).resolved()`;
`config = options.engine_config(devices, "accuracy")`

Options left at None are filled by `resolved()` from `tasks.defaults` (recipes, per-task values, the learning-rate
rule, the CPU-worker choice), once per run. Adding an option is one declaration here, e.g.
`vocab_size: int = DATA(15000, "nmt: words kept per side", metavar="N", check=_at_least(1))`; a value that is
given on the command line or in a --config file arrives in the field of that name.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import stat
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

from hogwild.config import MODES, Config, ConfigError
from hogwild.data.compressed import COMPRESSED_SUFFIXES
from hogwild.data.nmt_dataset import MIN_SPLIT_PAIRS, NmtDataConfig
from hogwild.data.pos_dataset import PosDataConfig
from hogwild.data.readers import FORMATS, TAGS
from hogwild.data.subwords import MODEL_TYPES as SUBWORDS
from hogwild.multihost.dist_config import ALGORITHMS, WIRE_FORMATS, DistConfig
from hogwild.shared_optim import OPTIMIZERS
from hogwild.tasks import defaults
from hogwild.tasks.defaults import RECIPES, TASKS, default_optimizer, resolve_recipe, schedule_fields
from hogwild.tasks.devices import CPU_WORKERS

PRESETS = ("small", "paper")
MOMENTUM_OPTIMIZERS = ("msgd", "nesterov")  # the optimizers whose momentum --momentum sets
_ZERO_IS_NONE = ("time_limit", "dev_limit")  # 0 given (a script's default undone) is the option left unset
DEV_TEXT = (f"pos: a seeded {PosDataConfig.dev_fraction:.0%} of the --train sentences; nmt: a seeded "
            f"{NmtDataConfig.dev_fraction:.0%} of the --train pairs, at most {NmtDataConfig.dev_size} (a corpus of "
            f"fewer than {MIN_SPLIT_PAIRS} pairs is refused)")


class OptionError(ValueError):
    """A run option's value is refused; the message starts with its flag (`--lr: ...`). run.py exits 2 with it."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{flag(name)}: {message}")
        self.name = name


def flag(name: str) -> str:
    """The command-line flag of an option: `time_limit` -> `--time-limit`; `shard_data` -> `--no-shard-data` (an
    option that is on by default has only its negative flag)."""
    option = declared().get(name) if name in RunOptions.__dataclass_fields__ else None
    return option.negative_flag if option is not None and option.negative_flag else "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Option:
    """The declaration of one run option, beside its name, type and default (the dataclass field)."""

    help: str
    group: str
    choices: tuple | None = None
    metavar: str | None = None
    default_text: str | None = None  # what the default means in --help, when the value alone does not say
    check: Callable[[Any], str | None] | None = None  # a message when the value is refused (not called on None)
    engine: str | None = None  # the hogwild.Config field this option sets (Config's errors there name the flag)
    dist: str | None = None  # the multi-host DistConfig field this option sets
    negative_flag: str | None = None  # a True default is turned off by this flag (e.g. --no-progress)
    parse: Callable[[str], Any] | None = None  # the flag's own parser, when the type's is not enough
    task: str | None = None  # the one task that reads this option (run.py refuses its flag for the other)
    source: str | None = None  # "corpus": read from --train's files only; "synthetic": by the synthetic task only


def _group(title: str) -> Callable[..., Any]:
    def declare(default: Any, help: str, **declaration: Any) -> Any:
        return field(default=default, metadata={"option": Option(help, title, **declaration)})
    return declare


TASK = _group("task and workers")
DATA = _group("data (no --train: the built-in synthetic task)")
OPTIMISATION = _group("optimisation")
STOPPING = _group("stopping, evaluation, run directory")
MULTI_HOST = _group("multi-host (run under mpiexec; see docs/multihost.md)")


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    return lambda value: None if value >= minimum else f"must be >= {minimum}, got {value}"


def _seed(value: int) -> str | None:  # the engine derives per-epoch and per-batch seeds from it, within 63 bits
    return None if 0 <= value < 2**32 else f"must be in [0, {2**32 - 1}], got {value}"


def _below_one(value: float) -> str | None:
    return None if 0.0 <= value < 1.0 else f"must be in [0, 1), got {value}"


def _inside_unit(value: float) -> str | None:
    return None if 0.0 < value < 1.0 else f"must be in (0, 1), got {value}"


def _minutes_or_off(text: str) -> float | None:
    """--checkpoint-minutes: a number of minutes; 0 or 'off': None (no checkpoint by time)."""
    if text.strip().lower() == "off":
        return None
    try:
        return float(text) or None
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of minutes, 0 or off; got {text!r}") from None


def _eval_device(value: str) -> str | None:
    return None if value in ("auto", "cpu") or re.fullmatch(r"cuda:\d+", value) else \
        f"must be auto, cpu or cuda:N, got {value!r}"


def _separator(value: str) -> str | None:
    return None if value and not any(c.isspace() for c in value) else \
        f"must be a non-empty string without spaces, got {value!r}"


@dataclass
class RunOptions:
    """One training run. Field names match the command-line flags (`--time-limit` -> time_limit)."""

    # --- task and workers ---
    task: str = TASK("pos", "pos: char-BiLSTM tagger; nmt: attention GRU", choices=TASKS)
    gpus: int = TASK(0, "one worker per GPU (cuda:0..N-1); 0: CPU", metavar="N", check=_at_least(0), engine="devices")
    workers: int = TASK(2, "CPU worker processes (without --gpus)", metavar="N", check=_at_least(1),
                        engine="devices")
    workers_per_gpu: int = TASK(1, "with --gpus: K Hogwild (or sync) workers share each GPU", metavar="K",
                                check=_at_least(1), engine="devices")
    mode: str = TASK("hogwild", "hogwild: lock-free async; sync: averaged gradients each step; single: one worker",
                     choices=MODES, engine="mode")
    preset: str = TASK("small", "model sizes (paper: the papers' sizes)", choices=PRESETS)
    recipe: str | None = TASK(None, "optimizer, lr rule, POS vocabulary (tasks/defaults.py)", choices=RECIPES,
                              default_text=defaults.RECIPE_TEXT)
    threads_per_worker: int = TASK(1, "torch threads per worker", metavar="N", check=_at_least(1),
                                   engine="threads_per_worker")
    amp: str | None = TASK(None, "bf16: forward under autocast (GPU workers); parameters and optimizer state stay "
                                 "fp32", choices=("bf16",), default_text="off", engine="amp")
    compile: str = TASK("off", "torch.compile each worker's step (reduce-overhead: also CUDA graphs on GPUs); it "
                               "compiles once per batch shape, in every worker (see --length-bucket)",
                        choices=("off", "default", "reduce-overhead"), engine="compile")
    graphs: str = TASK("auto", "GPU workers capture their step as one CUDA graph per batch shape at start-up (the "
                               "task's padded loss, lengths padded to buckets: tasks/defaults.py); auto: on with "
                               "--gpus unless --compile is set", choices=("auto", "on", "off"), engine="graphs")
    tf32: bool = TASK(False, "TF32 matrix products on GPU workers: faster, with fewer mantissa bits inside the "
                             "products", engine="tf32")
    pull_every: int = TASK(1, "GPU and replica workers pull the dense parameters every K updates only, saving K-1 "
                              "of K copies of the model; the updates a copy misses count as staleness (1: the "
                              "paper's recipe)", metavar="K", check=_at_least(1), engine="pull_every")
    cpu_workers: str | None = TASK(None, "CPU workers train in place on the shared parameters, or on a private "
                                         "replica refreshed before every step (one consistent version per step)",
                                   choices=tuple(CPU_WORKERS), default_text=defaults.CPU_WORKERS_TEXT,
                                   engine="devices")
    fused_step: bool = TASK(False, "CPU workers step with torch's fused optimizer kernel too (GPU workers do by "
                                   "default, and so does every worker of a several-worker adam run; "
                                   "docs/benchmarks.md); the last bits of rounding may differ",
                            engine="fused_step")
    update_threads: int | None = TASK(None, "torch threads of each GPU worker's CPU update (the shared optimizer "
                                            "step, applied while the next step computes); results are identical "
                                            "for any count", metavar="N", check=_at_least(1),
                                      default_text="(cores - 1) // workers - 1", engine="update_threads")
    data_assignment: str = TASK("queue", "queue: each epoch's batches are dealt, in a seeded order, to the workers' "
                                         "own queues (each batch to one worker); partition: a fixed shard per worker",
                                choices=("queue", "partition"), engine="data_assignment")
    # --- data ---
    train: list[str] | None = DATA(None, "pos: tagged files or folders; nmt: a file prefix (PREFIX.SRC_LANG, "
                                         "PREFIX.TGT_LANG)", metavar="PATH", default_text="the synthetic task")
    dev: str | None = DATA(None, "held-out set (not the --train file)", metavar="PATH", default_text=DEV_TEXT,
                           source="corpus")
    test: str | None = DATA(None, "scored with the best checkpoint at the end", metavar="PATH", default_text="none")
    format: str = DATA("auto", "pos: corpus format", choices=FORMATS, task="pos", source="corpus")
    word_column: int | None = DATA(None, "pos conll: 1-based word column", metavar="N", check=_at_least(1),
                                   default_text="the format's", task="pos", source="corpus")
    tag_column: int | None = DATA(None, "pos conll: 1-based tag column", metavar="N", check=_at_least(1),
                                  default_text="the format's", task="pos", source="corpus")
    tag: str | None = DATA(None, "pos: which tag", choices=TAGS, default_text="the format's main tag", task="pos",
                           source="corpus")
    separator: str = DATA("/", "pos slash format: word and tag split at the last SEP (e.g. _ for word_TAG corpora)",
                          metavar="SEP", check=_separator, task="pos", source="corpus")
    src_lang: str = DATA("fr", "nmt: source language suffix", task="nmt", source="corpus")
    tgt_lang: str = DATA("en", "nmt: target language suffix", task="nmt", source="corpus")
    encoding: str = DATA("utf-8", "text encoding of the corpora")
    train_limit: int | None = DATA(None, "nmt: first N training pairs only", metavar="N", check=_at_least(1),
                                   default_text="all", task="nmt", source="corpus")
    dev_limit: int | None = DATA(None, "evaluate on the first N held-out sentences only (0: all)", metavar="N",
                                 check=_at_least(0), default_text="all")
    eval_sentences: int | None = DATA(None, "periodic evaluations score a seeded sample of N held-out sentences, the "
                                            "end of the run all of them", metavar="N", check=_at_least(1),
                                      default_text=defaults.EVAL_SENTENCES_TEXT)
    max_len: int = DATA(50, "nmt: drop longer training pairs", metavar="N", check=_at_least(1), task="nmt")
    vocab_size: int = DATA(15000, "nmt: words kept per side", metavar="N", check=_at_least(1), task="nmt",
                           source="corpus")
    length_bucket: int | None = DATA(None, "nmt: pad source and target lengths up to multiples of N, so that batch "
                                           "shapes repeat (a compiled step compiles once per shape); 1: no padding",
                                     metavar="N", check=_at_least(1), default_text=defaults.LENGTH_BUCKET_TEXT,
                                     task="nmt")
    subwords: str | None = DATA(None, "nmt: sentencepiece subwords trained on the training side (saved in the run "
                                      "directory) instead of Moses words; BLEU is scored on the decoded text",
                                choices=SUBWORDS, default_text="Moses words", task="nmt")
    subword_vocab_size: int = DATA(8000, "nmt with --subwords: pieces per side (a soft limit: small corpora get "
                                         "fewer)", metavar="N", check=_at_least(8), task="nmt")
    word_min_freq: int | None = DATA(None, "pos: words seen fewer times are unk", metavar="N", check=_at_least(1),
                                     default_text=defaults.WORD_MIN_FREQ_TEXT, task="pos")
    synthetic_size: int | None = DATA(None, "sentences (pos) or pairs (nmt) of the synthetic task", metavar="N",
                                      check=_at_least(1), default_text=defaults.SYNTHETIC_SIZE_TEXT, source="synthetic")
    # --- optimisation ---
    optimizer: str | None = OPTIMISATION(None, "shared, lock-free optimizer", choices=OPTIMIZERS,
                                         default_text=defaults.OPTIMIZER_TEXT, engine="optimizer")
    lr: float | None = OPTIMISATION(None, "learning rate", default_text=defaults.LR_TEXT, engine="lr")
    lr_decay: float | None = OPTIMISATION(None, "linear lr decrease per --decay-updates updates (paper recipe: per "
                                                "epoch)", default_text=defaults.LR_DECAY_TEXT,
                                          engine="decay_per_epoch")
    decay_updates: int | None = OPTIMISATION(None, "count --lr-decay per N updates", metavar="N",
                                             default_text=defaults.DECAY_UPDATES_TEXT, engine="decay_updates")
    warmup_steps: int = OPTIMISATION(0, "> 0: warm up from lr to lr x workers", engine="warmup_steps")
    min_lr: float = OPTIMISATION(0.0, "floor of the learning rate", engine="min_lr")
    momentum: float | None = OPTIMISATION(None, "msgd/nesterov momentum", check=_below_one,
                                          default_text="the optimizer's (hogwild/shared_optim.py)",
                                          engine="optimizer_args")
    clip_norm: float | None = OPTIMISATION(None, "gradient norm clipping", default_text=defaults.CLIP_NORM_TEXT,
                                           engine="clip_norm")
    batch_size: int | None = OPTIMISATION(None, "sentences per update", check=_at_least(1),
                                          default_text=defaults.BATCH_SIZE_TEXT)
    dropout: float = OPTIMISATION(0.0, "model dropout", check=_below_one)
    # --- when to stop and evaluate ---
    epochs: int | None = STOPPING(None, "passes over the data", default_text=defaults.EPOCHS_TEXT, engine="epochs")
    steps: int | None = STOPPING(None, "stop after this many shared updates", default_text="no limit",
                                 engine="max_steps")
    time_limit: float | None = STOPPING(None, "stop after this long of training (0: no limit); a --resume trains "
                                              "this long again", metavar="SECONDS",
                                        check=_at_least(0), default_text="no limit", engine="time_limit")
    eval_every: int | None = STOPPING(None, "evaluate every this many updates", metavar="UPDATES",
                                      default_text=defaults.EVAL_EVERY_TEXT, engine="eval_every")
    eval_every_seconds: float | None = STOPPING(None, "evaluate this often", metavar="SECONDS",
                                                default_text="see --eval-every", engine="eval_every_seconds")
    eval_budget: float = STOPPING(0.1, "periodic evaluations take at most this share of the wall time (0: no cap)",
                                  metavar="SHARE", engine="eval_budget")
    eval_device: str = STOPPING("auto", "where the parent evaluates: a GPU is fast but, if a worker trains on it, "
                                        "slows that worker and fails in exclusive-process mode; the CPU is slower "
                                        "and shares the cores. auto: a GPU no worker uses, else the CPU while "
                                        "training, the first worker's GPU after it", metavar="DEVICE",
                                check=_eval_device, engine="eval_device")
    patience: int | None = STOPPING(None, "stop after this many evaluations without a new best", default_text="off",
                                    engine="patience")
    beam: int = STOPPING(5, "nmt: beam size of the final held-out translations (evaluations during training are "
                            "greedy)", check=_at_least(1), task="nmt")
    checkpoint_every: int | None = STOPPING(None, "write last.pt this often", metavar="UPDATES",
                                            default_text="at the end", engine="checkpoint_every")
    checkpoint_minutes: float | None = STOPPING(Config.checkpoint_minutes, "also write last.pt every this many "
                                                "minutes of training: a hard stop (kill -9, the OOM killer) loses at "
                                                "most that much; 0 or off: only --checkpoint-every and the end",
                                                metavar="MINUTES", parse=_minutes_or_off, check=_at_least(0),
                                                engine="checkpoint_minutes")
    log_every: int | None = STOPPING(None, "training-loss record every this many updates", metavar="UPDATES",
                                     default_text=defaults.LOG_EVERY_TEXT, engine="log_every")
    out: str | None = STOPPING(None, "run directory", metavar="DIR", default_text="runs/TASK-DATE-TIME",
                               engine="checkpoint_dir")
    resume: bool = STOPPING(False, "continue the run in --out from its last.pt, with that run's options (flags "
                                           "given override them); a new or empty --out starts the run, one that "
                                           "holds a run's files but no last.pt is refused",
                            engine="resume")
    seed: int = STOPPING(0, "data split, batch order and initialisation (0 to 2^32 - 1)", check=_seed,
                         engine="seed")
    progress: bool = STOPPING(True, "no progress bar", negative_flag="--no-progress", engine="progress")
    hang_timeout: float = STOPPING(Config.hang_timeout, "a worker without progress this long (or 20 of its median "
                                                        "steps, if longer) is hung: named, killed, last.pt written, "
                                                        "exit 1; multi-host: a rank silent this long, or an exchange "
                                                        "not done in it, aborts the job", metavar="SECONDS",
                                   engine="hang_timeout", dist="timeout_seconds")
    max_restarts: int = STOPPING(Config.max_restarts, "replace a worker that dies or hangs by a fresh process on its "
                                                      "device, its unfinished batches handed on, at most K times in "
                                                      "the run, counted afresh by each --resume (0: the first failure "
                                                      "stops it, last.pt written, exit 1); summary.json counts every "
                                                      "segment's", metavar="K", check=_at_least(0),
                                 engine="max_restarts")
    check_shm: bool = STOPPING(True, "do not check that /dev/shm can hold the shared parameters and optimizer state "
                                     "before spawning", negative_flag="--no-check-shm", engine="check_shm")
    # --- multi-host (MPI): the DistConfig of hogwild.multihost, whose defaults these are ---
    distributed: str | None = MULTI_HOST(None, "exchange parameters between hosts with this algorithm: "
                                         + ", ".join(ALGORITHMS),
                                         choices=ALGORITHMS, metavar="ALGO", default_text="one host",
                                         dist="algorithm")
    servers: int = MULTI_HOST(DistConfig.servers, "parameter-server ranks (downpour/easgd/eamsgd)",
                              check=_at_least(1), dist="servers")
    period: int = MULTI_HOST(DistConfig.period, "local updates between exchanges", check=_at_least(1), dist="period")
    n_push: int = MULTI_HOST(DistConfig.n_push, "downpour: push every n local updates", check=_at_least(1),
                             dist="n_push")
    n_fetch: int = MULTI_HOST(DistConfig.n_fetch, "downpour: fetch every n local updates", check=_at_least(1),
                              dist="n_fetch")
    alpha: float = MULTI_HOST(DistConfig.alpha, "easgd/eamsgd: elastic coefficient", check=_inside_unit,
                              dist="alpha")
    tester: bool = MULTI_HOST(DistConfig.tester, "an extra last rank evaluates the central model", dist="tester")
    shard_data: bool = MULTI_HOST(DistConfig.shard_data, "every host iterates over all batches (else host i trains "
                                                         "on batches[i::hosts])", negative_flag="--no-shard-data",
                                  dist="shard_data")
    wire: str = MULTI_HOST(DistConfig.wire, "what the exchanged values travel as (bf16, fp16: half the bytes, "
                                            "accumulated in fp32 where they land)", choices=WIRE_FORMATS, dist="wire")
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes (reproduction scripts label runs)

    def __post_init__(self) -> None:
        """The checks of the values only run.py uses (the engine's are Config's, in `engine_config`)."""
        for name, (kind, optional) in option_types().items():
            value = getattr(self, name)
            if not (value is None and optional):
                _check_type(name, kind, value)
                _check_declared(name, value)
        for name in _ZERO_IS_NONE:  # `--time-limit 0` is no limit, `--dev-limit 0` all: the value unset holds
            if getattr(self, name) == 0:
                setattr(self, name, None)
        optimizer = self.optimizer or default_optimizer(self.task, resolve_recipe(self.recipe, self.preset),
                                                        self.distributed)
        if self.task == "nmt" and self.word_min_freq is not None:
            raise OptionError("word_min_freq", "applies to --task pos only (NMT keeps the --vocab-size most frequent "
                                               "words)")
        if self.src_lang == self.tgt_lang:
            raise OptionError("tgt_lang", f"must differ from --src-lang (both are {self.src_lang!r})")
        if self.task == "nmt" and (self.word_column or self.tag_column or self.tag):
            raise OptionError("task", "--word-column, --tag-column and --tag apply to --task pos only")
        if self.length_bucket is not None and self.task != "nmt":
            raise OptionError("length_bucket", "applies to --task nmt only")
        if self.length_bucket is not None and self.length_bucket > self.max_len:
            raise OptionError("length_bucket", f"{self.length_bucket} is above --max-len {self.max_len}: every batch "
                                               f"would be padded to {self.length_bucket} positions, longer than any "
                                               f"pair; give at most --max-len (a compiled step is served by "
                                               f"{defaults.COMPILED_LENGTH_BUCKET})")
        if self.subwords is not None and self.task != "nmt":
            raise OptionError("subwords", "applies to --task nmt only")
        if self.subwords is not None and self.synthetic:
            raise OptionError("subwords", "needs --train text (the synthetic task has no text to cut into pieces)")
        if self.distributed == "eamsgd" and optimizer not in MOMENTUM_OPTIMIZERS:
            raise OptionError("optimizer", f"--distributed eamsgd needs a momentum optimizer (msgd or nesterov), got "
                                           f"{optimizer!r}; use --distributed easgd for plain SGD")
        if self.resume and not self.out:
            raise OptionError("resume", "needs --out DIR (the run directory to continue)")
        corpora = [("train", path) for path in self.train or []]
        for name, path in corpora + [(name, getattr(self, name)) for name in ("dev", "test") if getattr(self, name)]:
            _check_exists(name, path, self.task, (self.src_lang, self.tgt_lang))
        if self.dev:
            _check_not_trained_on(self.dev, self.train or [], self)

    @property
    def synthetic(self) -> bool:
        return not self.train

    def resolved(self) -> "RunOptions":
        """A copy with every default filled in from `tasks.defaults` (what config.json records)."""
        return dataclasses.replace(self, **defaults.fill_defaults(self))

    def optimizer_args(self) -> dict[str, Any]:
        if self.optimizer in MOMENTUM_OPTIMIZERS and self.momentum is not None:
            return {"momentum": self.momentum}
        return {}

    def engine_config(self, devices: list[str], best_metric: str | None = None, eval_at_start: bool = False) -> Config:
        """The hogwild.Config of this run (call on a `resolved()` copy): the options declared with `engine=` pass as
        they are, the rest as derived below; a value Config refuses raises OptionError naming the flag. best_metric
        None: the task's (`tasks.defaults.METRICS`).

        sparse_pull: a POS device worker ('cuda:N', 'cpu-replica') pulls only the embedding rows its sentence holds,
        not the whole word table, before every step ('cpu' workers train in place and pull nothing). The tagger
        embeds only its batch's ids, so the arithmetic is the same (tests/tasks/test_pos_task.py). NMT's embeddings are
        dense, and sync mode averages whole tables (Config refuses it there)."""
        derived = dict(
            devices=devices, optimizer_args=self.optimizer_args(),
            **schedule_fields(self.task, self.optimizer, self.lr, self.lr_decay, self.warmup_steps, self.min_lr,
                              self.recipe, self.decay_updates),
            eval_budget=self.eval_budget or None,  # 0: no cap
            checkpoint_minutes=self.checkpoint_minutes or None,  # 0 (a --config file's): off
            fused_step=True if self.fused_step else None,  # None: the engine's choice (on for GPU workers)
            sparse_pull=self.task == "pos" and self.mode != "sync",
            best_metric=best_metric or defaults.METRICS[self.task], best_mode="max", eval_at_start=eval_at_start)
        given = {option.engine: getattr(self, name) for name, option in declared().items()
                 if option.engine and option.engine not in derived}
        try:
            return Config(**given, **derived)
        except ConfigError as error:
            name = {**engine_fields(), "devices": "workers", "workers": "workers"}.get(error.field)
            if name is None:
                raise
            raise OptionError(name, error.reason) from None

    def dist_config(self) -> DistConfig:
        """The MPI module's DistConfig for these options (those declared with `dist=`)."""
        return DistConfig(**{option.dist: getattr(self, name) for name, option in declared().items() if option.dist})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@cache
def declared() -> dict[str, Option]:
    """Every run option's declaration, in the order of the dataclass (and of --help)."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(RunOptions) if "option" in f.metadata}


@cache
def option_types() -> dict[str, tuple[type, bool]]:
    """name -> (type, None allowed) of every field, from the annotations: int, float, str, bool, list or dict."""
    hints = typing.get_type_hints(RunOptions)
    types = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = type(None) in typing.get_args(hint)
        kind = typing.get_origin(args[0]) or args[0] if optional else typing.get_origin(hint) or hint
        types[name] = (kind, optional)
    return types


@cache
def engine_fields() -> dict[str, str]:
    """hogwild.Config field -> the option that sets it (the first one declared)."""
    names: dict[str, str] = {}
    for name, option in declared().items():
        if option.engine:
            names.setdefault(option.engine, name)
    return names


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list of paths",
               dict: "a mapping"}


def _check_type(name: str, kind: type, value: Any) -> None:
    if kind is float:
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif kind is list:
        fits = isinstance(value, list) and all(isinstance(item, str) for item in value)
    else:
        fits = isinstance(value, kind)
    if not fits:
        raise OptionError(name, f"must be {_TYPE_NAMES[kind]}, got {value!r}")
    if kind is float and not math.isfinite(value):  # float('nan') passes the type check and every comparison
        raise OptionError(name, f"must be a finite number, got {value!r}")


def _check_declared(name: str, value: Any) -> None:
    option = declared().get(name)
    if option is not None and option.choices is not None and value not in option.choices:
        raise OptionError(name, f"must be one of {', '.join(option.choices)}; got {value!r}")
    message = option.check(value) if option is not None and option.check else None
    if message:
        raise OptionError(name, message)


def check_value(name: str, value: Any) -> None:
    """The checks of one option's value on its own, type and range (for values read from a --config file, so that
    the error names the file)."""
    kind, optional = option_types()[name]
    if not (value is None and optional):
        _check_type(name, kind, value)
        _check_declared(name, value)


def _check_not_trained_on(dev: str, train: list[str], options: RunOptions) -> None:
    """--dev must not be (the same file as) a --train corpus: a held-out score on training data measures nothing.
    NMT corpora are prefixes: their source-language files are compared."""
    def files(path: str) -> str:
        if options.task == "pos":
            return path
        from hogwild.data.parallel import parallel_files
        return str(parallel_files(path, options.src_lang, options.tgt_lang)[0])
    for path in train:
        try:
            same = os.path.samefile(files(dev), files(path))
        except (OSError, ValueError):  # a file missing on one side: the reader names it
            continue
        if same:
            raise OptionError("dev", f"{dev} is the same corpus as --train {path}: a held-out set must not be "
                                     f"trained on; give another --dev, or none for a seeded split of --train")


def _special_file(path: str) -> str | None:
    """What a path that is neither a regular file nor a folder is (a FIFO, a device...), else None."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
                 if test(mode)), "not a regular file")


def _check_exists(name: str, path: str, task: str, languages: tuple[str, str]) -> None:
    """POS corpora are files or folders; NMT corpora are prefixes (PREFIX.fr / PREFIX.fr.xz exist, and a language's
    files are not all FIFOs or devices, which its reader would call missing)."""
    if task == "pos" or os.path.exists(path):
        if not os.path.exists(path):
            raise OptionError(name, f"{path} does not exist")
        kind = _special_file(path)
        if kind:
            raise OptionError(name, f"{path} is {kind}, not a corpus file or folder")
        return
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    if not os.path.isdir(folder) or not any(entry.startswith(base + ".") for entry in os.listdir(folder)):
        raise OptionError(name, f"no file {path}.<lang>[.xz|.gz|.bz2] found (NMT corpora are given as prefixes, "
                                f"e.g. europarl-fr-en/train for train.fr + train.en)")
    for language in languages:
        named = (f"{path}.{language}{suffix}" for suffix in ("", *COMPRESSED_SUFFIXES))
        there = [file for file in named if os.path.exists(file)]
        special = [(file, kind) for file in there if (kind := _special_file(file))]
        if special and len(special) == len(there):
            raise OptionError(name, f"{special[0][0]} is {special[0][1]}, not a corpus file")
