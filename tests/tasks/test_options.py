"""tasks.options: validation of every kind of bad value where it enters (RunOptions for run.py's own values,
hogwild.Config for the engine's, reported by the flag), task defaults, and the mapping onto hogwild.Config."""
import dataclasses
import os
import re

import pytest
import torch

from hogwild.tasks.defaults import default_lr
from hogwild.tasks.options import OptionError, RunOptions, declared, engine_fields


def test_resolved_fills_the_papers_defaults_per_task():
    pos = RunOptions(task="pos", train=None).resolved()
    assert (pos.batch_size, pos.lr, pos.lr_decay, pos.clip_norm, pos.epochs) == (1, 0.1, 0.0225, None, 1)
    paper = RunOptions(task="pos", train=None, recipe="paper").resolved()
    assert (paper.batch_size, paper.lr, paper.lr_decay, paper.clip_norm, paper.epochs) == (1, 0.03, 0.0135, None, 1)
    assert (pos.log_every, pos.eval_every, pos.eval_every_seconds) == (50, 250, None)
    real = RunOptions(task="pos", train=["tests/fixtures/data/tiny.conllu"]).resolved()
    assert (real.epochs, real.eval_every, real.eval_every_seconds) == (1, None, 60.0)
    nmt = RunOptions(task="nmt", recipe="paper").resolved()
    assert (nmt.batch_size, nmt.lr, nmt.lr_decay, nmt.clip_norm, nmt.epochs) == (32, 0.1, 0.0, 1.0, 2)  # batch 32
    nmt = RunOptions(task="nmt").resolved()  # the default recipe: Adam
    assert (nmt.optimizer, nmt.batch_size, nmt.lr, nmt.lr_decay, nmt.clip_norm) == ("adam", 32, 1e-3, 0.0, 1.0)
    adam = RunOptions(task="pos", optimizer="adam", time_limit=5).resolved()
    assert (adam.lr, adam.lr_decay, adam.epochs) == (1e-3, 0.0, None)
    assert default_lr("nmt", "sgd") == 0.1 and default_lr("pos", "adadelta") == 1.0


def test_engine_config_carries_every_training_choice():
    options = RunOptions(task="pos", optimizer="msgd", momentum=0.5, steps=7, eval_every=3, seed=4,
                         out="/tmp/x", checkpoint_every=2, clip_norm=0.5).resolved()
    config = options.engine_config(["cpu", "cpu"], "accuracy")
    assert config.devices == ["cpu", "cpu"] and config.workers == 2
    assert (config.optimizer, config.lr, config.optimizer_args) == ("msgd", 0.01, {"momentum": 0.5})
    assert (config.max_steps, config.eval_every, config.seed, config.checkpoint_every) == (7, 3, 4, 2)
    assert (config.best_metric, config.best_mode, config.clip_norm, config.checkpoint_dir) == (
        "accuracy", "max", 0.5, "/tmp/x")
    assert config.lr_schedule == "constant"
    sgd = RunOptions(task="pos", recipe="paper").resolved().engine_config(["cpu"], "accuracy")
    assert (sgd.lr_schedule, sgd.decay_per_epoch, sgd.min_lr) == ("linear_decay", 0.0135, pytest.approx(0.0003))
    sgd = RunOptions(task="pos").resolved().engine_config(["cpu"], eval_at_start=True)
    assert sgd.eval_at_start and sgd.best_metric == "accuracy"  # the task's metric
    assert (sgd.lr_schedule, sgd.decay_per_epoch, sgd.decay_updates, sgd.min_lr) == (
        "linear_decay", 0.0225, 40_000, pytest.approx(0.001))
    assert sgd.eval_budget == 0.1  # periodic evaluations within 10% of the wall time unless told otherwise
    capless = RunOptions(task="pos", eval_budget=0.0).resolved().engine_config(["cpu"], "accuracy")
    assert capless.eval_budget is None  # --eval-budget 0: every scheduled evaluation runs
    assert sgd.fused_step is None  # the engine decides: fused kernels on GPU workers only
    fused = RunOptions(task="pos", optimizer="adam", fused_step=True).resolved().engine_config(["cpu"], "accuracy")
    assert fused.fused_step is True  # --fused-step: CPU workers too
    warm = RunOptions(task="nmt", warmup_steps=10).resolved().engine_config(["cpu"] * 2, "bleu")
    assert (warm.lr_schedule, warm.warmup_steps) == ("warmup_scaled", 10)


@pytest.mark.parametrize("changes, message", [
    ({"task": "ner"}, "--task: must be one of pos, nmt"),
    ({"workers": 0}, "--workers: must be >= 1, got 0"),
    ({"gpus": -1}, "--gpus: must be >= 0"),
    ({"epochs": 2.5}, "--epochs: must be an integer, got 2.5"),
    ({"lr": "0.1"}, "--lr: must be a number, got '0.1'"),
    ({"train": "corpus.txt"}, "--train: must be a list of strings, got 'corpus.txt'"),
    ({"resume": 1}, "--resume: must be True or False, got 1"),
    ({"dropout": 1.0}, "--dropout: must be in [0, 1)"),
    ({"momentum": 1.5}, "--momentum: must be in [0, 1)"),
    ({"optimizer": "lbfgs"}, "--optimizer: must be one of sgd"),
    ({"resume": True}, "--resume: needs --out DIR"),
    ({"src_lang": "en"}, "--tgt-lang: must differ from --src-lang"),
    ({"task": "nmt", "tag": "upos"}, "--task: --word-column, --tag-column and --tag apply to --task pos only"),
    ({"distributed": "gossip"}, "--distributed: must be one of allreduce"),
    ({"alpha": 1.0}, "--alpha: must be in (0, 1), got 1.0"),
    ({"wire": "fp8"}, "--wire: must be one of fp32, bf16, fp16; got 'fp8'"),
    ({"eval_device": "gpu"}, "--eval-device: must be 'auto', 'cpu' or 'cuda:N', got 'gpu'"),
    ({"update_threads": 0}, "--update-threads: must be > 0, got 0"),
    ({"train": ["/nonexistent/corpus"]}, "--train: /nonexistent/corpus does not exist"),
    ({"task": "nmt", "train": ["/nonexistent/train"]}, "--train: no file /nonexistent/train.<lang>"),
    ({"seed": -1}, "--seed: must be in [0, 4294967295], got -1"),
    ({"seed": 2**32}, "--seed: must be in [0, 4294967295], got 4294967296"),
    ({"threads_per_worker": 0}, "--threads-per-worker: must be > 0, got 0"),
    ({"compile": "max-autotune"}, "--compile: must be one of off, default, reduce-overhead"),
    ({"pull_every": 0}, "--pull-every: must be > 0, got 0"),
    ({"task": "nmt", "length_bucket": 0}, "--length-bucket: must be >= 1, got 0"),
    ({"task": "pos", "length_bucket": 8}, "--length-bucket: applies to --task nmt only"),
    ({"time_limit": -3.0}, "--time-limit: must be >= 0, got -3.0"),
    ({"dev_limit": -1}, "--dev-limit: must be >= 0, got -1"),
])
def test_bad_values_are_rejected_naming_the_flag(changes, message):
    with pytest.raises(OptionError) as error:
        RunOptions(**changes)
    assert str(error.value).startswith(message)


def test_zero_is_off_for_the_options_declared_so():
    """`--time-limit 0` (no limit) and `--dev-limit 0` (all): what undoes a script's own default of them; also
    --checkpoint-minutes and --eval-budget. 0 or `off` on the command line, 0 in a --config file: None, once."""
    assert RunOptions(time_limit=0, dev_limit=0) == RunOptions()
    assert RunOptions(time_limit=0).resolved().epochs == 1  # no limit given: the synthetic task's default epochs
    from hogwild.tasks.run_flags import parse_run_options
    from hogwild.tasks.cli import train_parser
    for value in ("0", "off", "OFF"):
        options, _ = parse_run_options(train_parser(), [f"--{name}={value}" for name in (
            "time-limit", "dev-limit", "checkpoint-minutes", "eval-budget")])
        assert (options.time_limit, options.dev_limit, options.checkpoint_minutes, options.eval_budget) == (None,) * 4
        config = options.resolved().engine_config(["cpu"])
        assert (config.time_limit, config.checkpoint_minutes, config.eval_budget) == (None, None, None)
    kept = RunOptions(checkpoint_minutes=0.5, eval_budget=0.25).resolved().engine_config(["cpu"])
    assert (kept.checkpoint_minutes, kept.eval_budget) == (0.5, 0.25)


@pytest.mark.parametrize("changes, message", [
    ({"lr": 0.0}, "--lr: must be > 0, got 0.0"),
    ({"lr": float("nan")}, "--lr: must be a finite number, got nan"),
    ({"steps": 0}, "--steps: must be > 0, got 0"),
    ({"clip_norm": -1.0}, "--clip-norm: must be > 0, got -1.0"),
    ({"hang_timeout": 0.0}, "--hang-timeout: must be > 0, got 0.0"),
    ({"eval_budget": 1.5}, "--eval-budget: is a share of the wall time, in [0, 1]; got 1.5"),
    ({"eval_budget": -0.1}, "--eval-budget: must be >= 0, got -0.1"),
    ({"optimizer": "msgd", "momentum": -0.5}, "--momentum: must be in [0, 1)"),  # RunOptions' own check first
    ({"optimizer": "rmsprop", "fused_step": True}, "--fused-step: torch has a fused CPU kernel only for sgd"),
    ({"mode": "sync", "data_assignment": "partition"}, "--data-assignment: mode='sync' deals batches in lockstep"),
    ({"hang_timeout": 0.0}, "--hang-timeout: must be > 0, got 0.0"),
    ({"update_threads": 2}, "--update-threads: sets the threads of the background update thread"),
    ({"eval_device": f"cuda:{torch.cuda.device_count()}"}, f"--eval-device: cuda:{torch.cuda.device_count()} does "
                                                            "not exist"),
    ({"pull_every": 2}, "--pull-every: needs device workers"),  # 'cpu' workers pull nothing
    ({"mode": "sync", "compile": "default"}, "--compile: applies to Hogwild workers"),
    ({"graphs": "on"}, "--graphs: needs device workers"),  # 'cpu' workers train in place
])
def test_the_engines_refusals_name_the_flag(changes, message):
    """hogwild.Config checks the values it takes, once; its error reaches the user naming the flag."""
    try:
        options = RunOptions(**changes).resolved()
    except OptionError as error:
        assert str(error).startswith(message)
        return
    with pytest.raises(OptionError) as error:
        options.engine_config(["cpu", "cpu"], "accuracy")
    assert str(error.value).startswith(message)


def test_every_engine_field_passes_through_one_declaration():
    """A flag reaches hogwild.Config (which the workers receive) straight from its declaration, or derived in
    engine_config: every option declared with engine= lands in its Config field."""
    options = RunOptions(task="pos", optimizer="msgd", momentum=0.5, steps=7, epochs=3, time_limit=9.0,
                         eval_every=4, eval_every_seconds=2.0, patience=2, checkpoint_every=5, log_every=6,
                         out="/tmp/x", resume=True, seed=3, progress=False, threads_per_worker=2, clip_norm=0.25,
                         amp="bf16", mode="single", data_assignment="partition", hang_timeout=5.0,
                         check_shm=False, compile="reduce-overhead",
                         tf32=True).resolved()
    config = options.engine_config(["cpu"], "accuracy")
    assert (config.hang_timeout, config.check_shm) == (5.0, False)
    direct = {name: option.engine for name, option in declared().items()
              if option.engine and option.engine not in ("devices", "optimizer_args", "decay_per_epoch", "min_lr",
                                                         "decay_updates", "warmup_steps", "eval_budget",
                                                         "fused_step")}
    assert direct and all(getattr(config, engine) == getattr(options, name) for name, engine in direct.items())
    assert (config.max_steps, config.checkpoint_dir, config.optimizer_args) == (7, "/tmp/x", {"momentum": 0.5})
    assert engine_fields()["max_steps"] == "steps" and engine_fields()["checkpoint_dir"] == "out"


def test_nmt_prefix_is_accepted_when_its_language_files_exist(tmp_path):
    (tmp_path / "train.fr").write_text("a\n")
    (tmp_path / "train.en").write_text("b\n")
    assert RunOptions(task="nmt", train=[str(tmp_path / "train")]).train == [str(tmp_path / "train")]


def test_an_nmt_language_file_that_is_a_fifo_or_a_device_is_named(tmp_path):
    """train.fr a FIFO, or a link to /dev/zero: the reader said "train.fr: file not found"."""
    os.mkfifo(tmp_path / "train.fr")
    (tmp_path / "train.en").write_text("b\n")
    with pytest.raises(OptionError, match=rf"^--train: {re.escape(str(tmp_path / 'train.fr'))} is a FIFO \(named "
                                          rf"pipe\), not a corpus file$"):
        RunOptions(task="nmt", train=[str(tmp_path / "train")])
    (tmp_path / "dev.en").symlink_to("/dev/zero")
    (tmp_path / "dev.fr").write_text("a\n")
    with pytest.raises(OptionError, match=r"^--dev: .*/dev\.en is a character device, not a corpus file$"):
        RunOptions(task="nmt", dev=str(tmp_path / "dev"))
    (tmp_path / "train.fr.xz").write_bytes(b"")  # a regular file of the language beside it: the reader takes that one
    assert RunOptions(task="nmt", train=[str(tmp_path / "train")]).train == [str(tmp_path / "train")]


def test_eval_sentences_defaults_per_task_and_is_checked():
    assert RunOptions(task="nmt").resolved().eval_sentences == 500  # greedy decoding of the periodic sample
    assert RunOptions(task="pos").resolved().eval_sentences is None  # tagging all of dev is cheap
    assert RunOptions(task="nmt", eval_sentences=50).resolved().eval_sentences == 50
    with pytest.raises(ValueError, match="^--eval-sentences: must be >= 1"):
        RunOptions(eval_sentences=0)


def test_resolved_is_a_copy_that_keeps_what_was_given():
    given = RunOptions(task="nmt", lr=0.5, batch_size=3, extra={"label": "x"})
    resolved = given.resolved()
    assert given.optimizer is None and given.batch_size == 3  # the original is left as it was
    assert (resolved.optimizer, resolved.lr, resolved.batch_size, resolved.extra) == ("adam", 0.5, 3, {"label": "x"})
    assert dataclasses.replace(resolved, optimizer=None).resolved().optimizer == "adam"


def test_dev_that_is_the_training_corpus_is_refused_naming_both_flags(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("The/at dog/nn barks/vbz\n")
    (tmp_path / "link.txt").symlink_to(corpus)
    for dev in (corpus, tmp_path / "link.txt", tmp_path / "." / "train.txt"):  # the same file, however named
        with pytest.raises(OptionError, match=rf"--dev: {re.escape(str(dev))} is the same corpus as --train "
                                              rf"{re.escape(str(corpus))}: a held-out set must not be trained on"):
            RunOptions(train=[str(corpus)], dev=str(dev))
    (tmp_path / "other.txt").write_text("The/at dog/nn barks/vbz\n")  # equal text, another file: allowed
    assert RunOptions(train=[str(corpus)], dev=str(tmp_path / "other.txt")).dev == str(tmp_path / "other.txt")
    for lang in ("fr", "en"):
        (tmp_path / f"europarl.{lang}").write_text("x\n")
    with pytest.raises(OptionError, match=r"--dev: .*/europarl is the same corpus as --train .*/europarl"):
        RunOptions(task="nmt", train=[str(tmp_path / "europarl")], dev=str(tmp_path / "europarl"))


def test_the_dev_help_says_how_the_held_out_set_is_split():
    from hogwild.tasks.cli import train_parser
    text = " ".join(train_parser().format_help().split())
    assert ("held-out set (not the --train file) (default: pos: a seeded 10% of the --train sentences; nmt: a seeded "
            "10% of the --train pairs, at most 3000 (a corpus of fewer than 10 pairs is refused))") in text


@pytest.mark.parametrize("task", ["pos", "nmt"])
def test_a_graphed_job_trains_the_padded_loss_on_length_buckets(task):
    """--graphs (on with --gpus by default): the task's padded loss and its batches padded to the bucket edges."""
    from hogwild.tasks.job_builders import build_job
    from hogwild.data.buckets import training_buckets
    options = RunOptions(task=task, synthetic_size=120).resolved()
    assert options.engine_config(["cuda:0"]).graphed("cuda:0") and not options.engine_config(["cpu"]).graphed("cpu")
    plain, graphed = build_job(options), build_job(options, fixed_shapes=True)
    assert plain.loss_fn.__name__ == f"{task}_loss" and graphed.loss_fn.keywords == {"padded": True}
    edges = training_buckets(task, True, options.max_len).edges
    keys = ("words", "tags") if task == "pos" else ("src", "tgt")
    assert len(plain.batches) == len(graphed.batches)
    for tight, padded in zip(plain.batches, graphed.batches):
        assert padded["tokens"] == tight["tokens"]
        for key in keys:
            size = tight[key].shape[1]
            assert padded[key].shape[1] == min([edge for edge in edges if edge >= size] or [size])
            assert torch.equal(padded[key][:, :size], tight[key])
    loss, tokens = graphed.loss_fn(graphed.model, graphed.batches[0])
    expected, _ = plain.loss_fn(plain.model, plain.batches[0])
    assert tokens == graphed.batches[0]["tokens"] and loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_nmt_batches_are_padded_to_length_buckets_by_default_only_when_compiling():
    from hogwild.tasks.nmt_task import nmt_job
    assert RunOptions(task="pos").resolved().length_bucket is None
    assert RunOptions(task="nmt").resolved().length_bucket == 1
    assert RunOptions(task="nmt", compile="default").resolved().length_bucket == 8
    assert RunOptions(task="nmt", compile="default", length_bucket=4).resolved().length_bucket == 4
    plain = nmt_job(RunOptions(task="nmt", synthetic_size=200).resolved()).batches
    bucketed = nmt_job(RunOptions(task="nmt", synthetic_size=200, compile="default").resolved()).batches
    assert len(plain) == len(bucketed)
    assert any(batch["tgt"].shape[1] % 8 for batch in plain)
    for tight, padded in zip(plain, bucketed):
        for key in ("src", "tgt"):
            size = tight[key].shape[1]
            assert padded[key].shape[1] == -(-size // 8) * 8 and torch.equal(padded[key][:, :size], tight[key])
