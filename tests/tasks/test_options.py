"""tasks.options: validation of every kind of bad value, task defaults, and the mapping onto hogwild.Config."""
import pytest

from hogwild.tasks.learning_rate import default_lr
from hogwild.tasks.options import RunOptions


def test_resolved_fills_the_papers_defaults_per_task():
    pos = RunOptions(task="pos", train=None).resolved()
    assert (pos.batch_size, pos.lr, pos.lr_decay, pos.clip_norm, pos.epochs) == (1, 0.1, 0.0225, None, 2)
    paper = RunOptions(task="pos", train=None, recipe="paper").resolved()
    assert (paper.batch_size, paper.lr, paper.lr_decay, paper.clip_norm, paper.epochs) == (1, 0.03, 0.0135, None, 2)
    assert (pos.log_every, pos.eval_every, pos.eval_every_seconds) == (50, 250, None)
    real = RunOptions(task="pos", train=["tests/fixtures/data/tiny.conllu"]).resolved()
    assert (real.epochs, real.eval_every, real.eval_every_seconds) == (1, None, 60.0)
    nmt = RunOptions(task="nmt", recipe="paper").resolved()
    assert (nmt.batch_size, nmt.lr, nmt.lr_decay, nmt.clip_norm) == (32, 0.1, 0.0, 1.0)  # synthetic batch 32
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
    sgd = RunOptions(task="pos").resolved().engine_config(["cpu"], "accuracy")
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
    ({"lr": 0.0}, "--lr: must be a positive number"),
    ({"lr": float("nan")}, "--lr: must be a positive number"),
    ({"time_limit": -3.0}, "--time-limit: must be a positive number"),
    ({"steps": 0}, "--steps: must be >= 1"),
    ({"eval_budget": 1.5}, "--eval-budget: is a share of the wall time, in [0, 1]; got 1.5"),
    ({"eval_budget": -0.1}, "--eval-budget: is a share"),
    ({"dropout": 1.0}, "--dropout: must be in [0, 1)"),
    ({"momentum": 1.5}, "--momentum: must be in [0, 1)"),
    ({"optimizer": "lbfgs"}, "--optimizer: must be one of sgd"),
    ({"resume": True}, "--resume: needs --out DIR"),
    ({"src_lang": "en"}, "--tgt-lang: must differ from --src-lang"),
    ({"task": "nmt", "tag": "upos"}, "--task: --word-column, --tag-column and --tag apply to --task pos only"),
    ({"distributed": "gossip"}, "--distributed: must be one of allreduce"),
    ({"optimizer": "rmsprop", "fused_step": True}, "--fused-step: torch has a fused CPU kernel only for sgd"),
    ({"mode": "sync", "data_assignment": "partition"}, "--data-assignment: --mode sync deals batches in lockstep"),
    ({"train": ["/nonexistent/corpus"]}, "--train: /nonexistent/corpus does not exist"),
    ({"task": "nmt", "train": ["/nonexistent/train"]}, "--train: no file /nonexistent/train.<lang>"),
])
def test_bad_values_are_rejected_naming_the_flag(changes, message):
    with pytest.raises(ValueError) as error:
        RunOptions(**changes)
    assert str(error.value).startswith(message)


def test_nmt_prefix_is_accepted_when_its_language_files_exist(tmp_path):
    (tmp_path / "train.fr").write_text("a\n")
    (tmp_path / "train.en").write_text("b\n")
    assert RunOptions(task="nmt", train=[str(tmp_path / "train")]).train == [str(tmp_path / "train")]


def test_eval_sentences_defaults_per_task_and_is_checked():
    assert RunOptions(task="nmt").resolved().eval_sentences == 500  # greedy decoding of the periodic sample
    assert RunOptions(task="pos").resolved().eval_sentences is None  # tagging all of dev is cheap
    assert RunOptions(task="nmt", eval_sentences=50).resolved().eval_sentences == 50
    with pytest.raises(ValueError, match="^--eval-sentences: must be >= 1"):
        RunOptions(eval_sentences=0)
