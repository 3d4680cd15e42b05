"""What one `run.py` training run is asked to do: `RunOptions`, each option declared once. The engine's options are
`hogwild.Config`'s fields, declared in hogwild/config.py with their help, group, allowed values and checks: each
field is an option of the same name here (or of the name it declares with `cli=`), its default Config's, unless
SET_BY_RUN says run.py sets it itself. run.py's own options are declared below in the same way (`TASK(default, help,
...)`), with the task they apply to and the multi-host `DistConfig` field they set. The command line
(`tasks.run_flags`) is generated from these declarations, and `engine_config` turns the options into the engine's
`hogwild.Config` (the object the workers receive), naming the flag when Config refuses a value.

Usage: `options = RunOptions(task="pos", workers=2, time_limit=60).resolved()`;
`config = options.engine_config(devices, "accuracy")`

A new engine option is a Config field and the code that reads it: run.py has its flag, help, default and checks.
Options left at None are filled by `resolved()` from `tasks.defaults` (recipes, per-task values, the learning-rate
rule, the CPU-worker choice), once per run. A value given on the command line or in a --config file arrives in the
field of that name.
"""
from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

from hogwild import config as engine
from hogwild.config import Config, ConfigError
from hogwild.config_fields import Setting, refusal, value_types, zero_to_none
from hogwild.data.nmt_dataset import MIN_SPLIT_PAIRS, NmtDataConfig
from hogwild.data.pos_dataset import PosDataConfig
from hogwild.data.readers import FORMATS, TAGS
from hogwild.data.subwords import MODEL_TYPES as SUBWORDS
from hogwild.multihost.dist_config import ALGORITHMS, WIRE_FORMATS, DistConfig
from hogwild.shared_optim import MOMENTUM_OPTIMIZERS
from hogwild.tasks import defaults
from hogwild.tasks.corpus_checks import corpus_refusal, same_corpus_refusal
from hogwild.tasks.defaults import (RECIPES, RUN_DEFAULTS, TASKS, default_optimizer, resolve_recipe,
                                    schedule_fields)
from hogwild.tasks.devices import CPU_WORKERS

PRESETS = ("small", "paper")
DEV_TEXT = (f"pos: a seeded {PosDataConfig.dev_fraction:.0%} of the --train sentences; nmt: a seeded "
            f"{NmtDataConfig.dev_fraction:.0%} of the --train pairs, at most {NmtDataConfig.dev_size} (a corpus of "
            f"fewer than {MIN_SPLIT_PAIRS} pairs is refused)")

# hogwild.Config's fields that are not run.py flags of their own: run.py sets them itself, or leaves the engine's
# default. Each names the option whose flag a refusal of its value names (None: none). Every other field is a flag.
SET_BY_RUN: dict[str, str | None] = {
    "devices": "workers", "workers": "workers",  # from --gpus, --workers, --workers-per-gpu, --cpu-workers
    "fused_step": "fused_step",  # --fused-step: on for every worker; not given: the engine's choice
    "optimizer_args": "momentum",
    "lr_schedule": "lr_decay",  # --lr-decay and --warmup-steps pick it (tasks.defaults.schedule_fields)
    "sparse_pull": None,  # on for POS device workers (engine_config)
    "best_metric": None, "best_mode": None, "eval_at_start": None,  # the task's metric, max; a fresh run's start
    "overlap_update": None, "pin_shared": None, "graph_limit": None, "skip_nonfinite": None,  # the engine's own
    "max_nonfinite_in_a_row": None, "target": None, "tensorboard": None, "shuffle": None, "queue_depth": None,
    "join_timeout": None,
}
# What run.py does with an engine option beyond what the engine does: its --help adds it to the field's help
NOTES = {
    "compile": "see --length-bucket",
    "graphs": "run.py trains the task's padded loss on lengths padded to buckets (tasks/defaults.py)",
    "lr_decay": "> 0 picks it", "warmup_steps": "> 0 picks it, and no decay",
    "seed": "also of the held-out split and of the model's initialisation; 0 to 2^32 - 1",
    "resume": "with that run's options (flags given override them); a new or empty --out starts the run, one that "
              "holds a run's files but no last.pt is refused",
    "hang_timeout": "multi-host: a rank silent this long, or an exchange not done in it, aborts the job",
    "max_restarts": "counted afresh by each --resume (summary.json counts every segment's)",
}


class OptionError(ValueError):
    """A run option's value is refused; the message starts with its flag (`--lr: ...`). run.py exits 2 with it."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{flag(name)}: {message}")
        self.name = name


def flag(name: str) -> str:
    """The command-line flag of an option: `time_limit` -> `--time-limit`; `progress` -> `--no-progress` (an
    option that is on by default has only its negative flag)."""
    option = declared().get(name) if name in RunOptions.__dataclass_fields__ else None
    return option.negative_flag if option is not None and option.negative_flag else "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Option(Setting):
    """The declaration of one run option: hogwild.config_fields.Setting, and what run.py does with it."""

    default_text: str | None = None  # what the default means in --help, when the value alone does not say
    engine: str | None = None  # the hogwild.Config field it is (Config's refusals there name its flag)
    dist: str | None = None  # the multi-host DistConfig field this option sets
    negative_flag: str | None = None  # the flag that turns off an option on by default (declared() sets it)
    task: str | None = None  # the one task that reads this option (run.py refuses its flag for the other)
    source: str | None = None  # "corpus": read from --train's files only; "synthetic": by the synthetic task only


def _group(title: str) -> Callable[..., Any]:
    def declare(default: Any, help: str, **declaration: Any) -> Any:
        return field(default=default, metadata={"setting": Option(help, title, **declaration)})
    return declare


_TASK, _DATA = "task", "data (no --train: the built-in synthetic task)"
_MULTI_HOST = "multi-host (run under mpiexec; see docs/multihost.md)"
# --help's sections in this order (the engine's options first in each, then run.py's own); any other after these
HELP_ORDER = (_TASK, engine.WORKERS, engine.DEVICE_WORKERS, _DATA, engine.OPTIMIZATION, engine.STOPPING,
              engine.EVALUATION, engine.RUN_DIRECTORY, engine.DATA_ORDER, engine.FAILURES, _MULTI_HOST)
TASK, DATA, MULTI_HOST = _group(_TASK), _group(_DATA), _group(_MULTI_HOST)
WORKERS, DEVICE_WORKERS = _group(engine.WORKERS), _group(engine.DEVICE_WORKERS)
OPTIMIZATION, EVALUATION = _group(engine.OPTIMIZATION), _group(engine.EVALUATION)


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    return lambda value: None if value >= minimum else f"must be >= {minimum}, got {value}"


def _below_one(value: float) -> str | None:
    return None if 0.0 <= value < 1.0 else f"must be in [0, 1), got {value}"


def _inside_unit(value: float) -> str | None:
    return None if 0.0 < value < 1.0 else f"must be in (0, 1), got {value}"


def _separator(value: str) -> str | None:
    return None if value and not any(c.isspace() for c in value) else \
        f"must be a non-empty string without spaces, got {value!r}"


def _engine_option(config_field: dataclasses.Field, name: str, kind: Any) -> tuple[Any, Any]:
    """The type and field of the run option that is Config's field of type `kind`: its declaration, with the flags
    of the engine options its help names (`eval_budget` -> `--eval-budget`), run.py's note, and run.py's own default
    where tasks.defaults fills it per run (RUN_DEFAULTS: None until then)."""
    declared = config_field.metadata["setting"]
    default = None if name in RUN_DEFAULTS else config_field.default
    help_text = "; ".join(filter(None, (_flags_named(declared.help), NOTES.get(name))))
    none = declared.none and _flags_named(declared.none)
    option = Option(**{**vars(declared), "help": help_text, "none": none}, engine=config_field.name,
                    default_text=RUN_DEFAULTS.get(name))
    return (typing.Optional[kind] if default is None else kind), field(default=default, metadata={"setting": option})


def _flags_named(text: str) -> str:
    """A field's help with the engine fields it names that are run.py flags written as those flags."""
    names = _engine_names()
    return re.sub(r"\b[a-z]+(?:_[a-z0-9]+)+\b", lambda word: "--" + names[word[0]].replace("_", "-")
                  if word[0] in names else word[0], text)


@cache
def _engine_names() -> dict[str, str]:
    """Config field -> the run option it is, for every field that is one."""
    return {f.name: f.metadata["setting"].cli or f.name for f in dataclasses.fields(Config) if f.name not in SET_BY_RUN}


def _with_engine_options(cls: type) -> type:
    """Add to a class body of run.py's own options an option for each hogwild.Config field not in SET_BY_RUN."""
    kinds = typing.get_type_hints(Config)
    for config_field in dataclasses.fields(Config):
        name = _engine_names().get(config_field.name)
        if name is None:
            continue
        if name in cls.__annotations__:
            raise TypeError(f"tasks/options.py declares {name!r}, which is hogwild.Config's {config_field.name!r}: "
                            f"an option is declared once (or name the field in SET_BY_RUN)")
        cls.__annotations__[name], option = _engine_option(config_field, name, kinds[config_field.name])
        setattr(cls, name, option)
    return cls


@dataclass
@_with_engine_options
class RunOptions:
    """One training run: run.py's own options, declared here, and the engine's (hogwild.Config's fields, added by
    _with_engine_options). Field names match the command-line flags (`--time-limit` -> time_limit)."""

    task: str = TASK("pos", "pos: char-BiLSTM tagger; nmt: attention GRU", choices=TASKS)
    preset: str = TASK("small", "model sizes (paper: the papers' sizes)", choices=PRESETS)
    recipe: str | None = TASK(None, "optimizer, lr rule, POS vocabulary (tasks/defaults.py)", choices=RECIPES,
                              default_text=defaults.RECIPE_TEXT)
    gpus: int = WORKERS(0, "one worker per GPU (cuda:0..N-1); 0: CPU", metavar="N", check=_at_least(0))
    workers: int = WORKERS(2, "CPU worker processes (without --gpus)", metavar="N", check=_at_least(1))
    workers_per_gpu: int = WORKERS(1, "with --gpus: K Hogwild (or sync) workers share each GPU", metavar="K",
                                   check=_at_least(1))
    cpu_workers: str | None = WORKERS(None, "CPU workers train in place on the shared parameters, or on a private "
                                            "replica refreshed before every step (one consistent version per step)",
                                      choices=tuple(CPU_WORKERS), default_text=defaults.CPU_WORKERS_TEXT)
    fused_step: bool = DEVICE_WORKERS(False, "CPU workers step with torch's fused optimizer kernel too (GPU workers "
                                             "do by default, and so does every worker of a several-worker adam run; "
                                             "docs/benchmarks.md); the last bits of rounding may differ")
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
    dev_limit: int | None = DATA(None, "evaluate on the first N held-out sentences only", metavar="N",
                                 check=_at_least(0), none="all", zero_is_off=True)
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
    momentum: float | None = OPTIMIZATION(None, "msgd/nesterov momentum", check=_below_one,
                                          default_text="the optimizer's (hogwild/shared_optim.py)")
    batch_size: int | None = OPTIMIZATION(None, "sentences per update", check=_at_least(1),
                                          default_text=defaults.BATCH_SIZE_TEXT)
    dropout: float = OPTIMIZATION(0.0, "model dropout", check=_below_one)
    beam: int = EVALUATION(5, "nmt: beam size of the final held-out translations (evaluations during training are "
                              "greedy)", check=_at_least(1), task="nmt")
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
    shard_data: bool = MULTI_HOST(DistConfig.shard_data, "host i trains on batches[i::hosts] (off: every host "
                                                         "iterates over all batches)", dist="shard_data")
    wire: str = MULTI_HOST(DistConfig.wire, "what the exchanged values travel as (bf16, fp16: half the bytes, "
                                            "accumulated in fp32 where they land)", choices=WIRE_FORMATS, dist="wire")
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes (reproduction scripts label runs)

    def __post_init__(self) -> None:
        """Each option's own checks, as declared (the engine's are Config's); "0 means off"; then the checks of
        run.py's options together (the engine's together are Config's, in `engine_config`)."""
        for name in value_types(RunOptions):
            message = refusal(RunOptions, name, getattr(self, name))
            if message:
                raise OptionError(name, message)
        zero_to_none(self)  # `--time-limit 0` is no limit, `--dev-limit 0` all: undoing a script's own default
        if not 0 <= self.seed < 2**32:  # the tasks seed numpy's split and sampling with it
            raise OptionError("seed", f"must be in [0, {2**32 - 1}], got {self.seed}")
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
        if self.distributed and self.hang_timeout is None:
            raise OptionError("hang_timeout", "a multi-host job needs one: its ranks abort on a silent rank")
        if self.resume and not self.out:
            raise OptionError("resume", "needs --out DIR (the run directory to continue)")
        self._check_corpora()

    def _check_corpora(self) -> None:
        languages = (self.src_lang, self.tgt_lang)
        corpora = [("train", path) for path in self.train or []]
        for name, path in corpora + [(name, getattr(self, name)) for name in ("dev", "test") if getattr(self, name)]:
            message = corpus_refusal(self.task, path, languages)
            if message:
                raise OptionError(name, message)
        message = self.dev and same_corpus_refusal(self.dev, self.train or [], self.task, languages)
        if message:
            raise OptionError("dev", message)

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
        """The hogwild.Config of this run (call on a `resolved()` copy): the engine's options as they are, the fields
        of SET_BY_RUN as derived below; a value Config refuses raises OptionError naming the flag. best_metric
        None: the task's (`tasks.defaults.METRICS`).

        sparse_pull: a POS device worker ('cuda:N', 'cpu-replica') pulls only the embedding rows its sentence holds,
        not the whole word table, before every step ('cpu' workers train in place and pull nothing). The tagger
        embeds only its batch's ids, so the arithmetic is the same (tests/tasks/test_pos_task.py). NMT's embeddings are
        dense, and sync mode averages whole tables (Config refuses it there)."""
        given = {option.engine: getattr(self, name) for name, option in declared().items() if option.engine}
        derived = dict(
            devices=devices, optimizer_args=self.optimizer_args(),
            **schedule_fields(self.task, self.optimizer, self.lr, self.lr_decay, self.warmup_steps, self.min_lr,
                              self.recipe, self.decay_updates),
            fused_step=True if self.fused_step else None,  # None: the engine's choice (on for GPU workers)
            sparse_pull=self.task == "pos" and self.mode != "sync",
            best_metric=best_metric or defaults.METRICS[self.task], best_mode="max", eval_at_start=eval_at_start)
        try:
            return Config(**{**given, **derived})
        except ConfigError as error:
            name = {**engine_fields(), **SET_BY_RUN}.get(error.field)
            if name is None:
                raise
            raise OptionError(name, error.reason) from None

    def dist_config(self) -> DistConfig:
        """The MPI module's DistConfig for these options (those declared with `dist=`; its timeout is
        --hang-timeout's)."""
        return DistConfig(**{option.dist: getattr(self, name) for name, option in declared().items() if option.dist},
                          timeout_seconds=self.hang_timeout)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@cache
def declared() -> dict[str, Option]:
    """Every run option's declaration, in --help's order: by HELP_ORDER's sections, the engine's options first in
    each (in Config's order), then run.py's own (in RunOptions' order). An option on by default has its negative
    flag (--no-progress)."""
    fields = [f for f in dataclasses.fields(RunOptions) if "setting" in f.metadata]
    rank = {title: index for index, title in enumerate(HELP_ORDER)}

    def place(index: int) -> tuple[int, bool, int]:
        option = fields[index].metadata["setting"]
        return rank.get(option.group, len(HELP_ORDER)), option.engine is None, index
    ordered = [fields[index] for index in sorted(range(len(fields)), key=place)]
    return {f.name: dataclasses.replace(f.metadata["setting"], negative_flag=f"--no-{f.name.replace('_', '-')}")
            if f.default is True else f.metadata["setting"] for f in ordered}


@cache
def engine_fields() -> dict[str, str]:
    """hogwild.Config field -> the run option that is it (for the engine's options)."""
    return {option.engine: name for name, option in declared().items() if option.engine}


def check_value(name: str, value: Any) -> None:
    """The checks of one option's value on its own, as declared: type, allowed values, check (for values read from
    a --config file, so that the error names the file)."""
    message = refusal(RunOptions, name, value)
    if message:
        raise OptionError(name, message)
