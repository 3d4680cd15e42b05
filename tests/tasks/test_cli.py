"""tasks.cli / run.py: every flag in --help with its default, bad flag values and bad input files end with one
clear line and a non-zero exit (no traceback), and --gpus on a machine without enough GPUs."""
import dataclasses
import re

import pytest

from hogwild.tasks import defaults
from hogwild.tasks.cli import main, run_options, tag_parser, train_parser, translate_parser
from hogwild.tasks.options import RunOptions

from tests.tasks.helpers import run_py

TRAINING_FLAGS = ["--task", "--gpus", "--workers", "--preset", "--train", "--dev", "--test", "--format",
                  "--word-column", "--tag-column", "--tag", "--src-lang", "--tgt-lang", "--optimizer", "--lr",
                  "--batch-size", "--epochs", "--steps", "--time-limit", "--eval-every", "--mode", "--out", "--resume", "--seed",
                  "--encoding", "--distributed", "--servers", "--period", "--alpha", "--tester"]


def test_help_lists_every_issue_flag_with_its_default():
    text = train_parser().format_help()
    for flag in TRAINING_FLAGS:
        assert re.search(rf"(^|\s){re.escape(flag)}[\s,=]", text), flag
    options = [a for a in train_parser()._actions if a.option_strings and a.dest != "help"]
    assert text.count("(default:") == len(options) >= len(TRAINING_FLAGS)  # every flag shows its default
    entry = text.split("  --workers N", 1)[1].split("\n  --", 1)[0]
    assert " ".join(entry.split()) == "CPU worker processes (without --gpus) (default: 2)"
    assert "--checkpoint RUN_DIR" in text  # the epilog names the subcommands
    flat = " ".join(text.split())
    assert f"learning rate (default: {defaults.LR_TEXT})" in flat  # generated from the recipe table
    assert "(default: the recipe optimizer's: pos 0.1 (paper 0.03), nmt 0.001 (paper 0.1);" in flat
    assert "--no-progress no progress bar (default: off)" in flat


def test_every_run_option_is_a_flag_with_its_declared_default():
    parsed = vars(train_parser().parse_args([]))
    assert RunOptions(**parsed) == RunOptions()
    assert set(parsed) == {f.name for f in dataclasses.fields(RunOptions)} - {"extra"}


def test_flags_parse_into_options():
    args = train_parser().parse_args(["--task", "nmt", "--gpus", "2", "--train", "a/train", "--lr", "0.5", "--steps",
                                      "10", "--mode", "sync", "--no-progress", "--distributed", "easgd", "--tester"])
    assert (args.task, args.gpus, args.train, args.lr, args.steps, args.mode) == ("nmt", 2, ["a/train"], 0.5, 10,
                                                                                 "sync")
    assert (args.progress, args.distributed, args.tester, args.workers, args.preset) == (False, "easgd", True, 2,
                                                                                         "small")
    tag = tag_parser().parse_args(["--checkpoint", "runs/x", "a.txt", "b.txt"])
    assert (tag.checkpoint, tag.files, tag.format) == ("runs/x", ["a.txt", "b.txt"], "slash")
    assert translate_parser().parse_args(["--checkpoint", "r", "--beam", "3"]).beam == 3


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "--workers: must be >= 1, got 0"),
    (["--lr", "-1"], "--lr: must be > 0, got -1.0"),  # hogwild.Config's check, reported by the flag
    (["--fused-step", "--optimizer", "rmsprop"], "--fused-step: torch has a fused CPU kernel only for sgd"),
    (["--min-lr", "0.5"], "--min-lr: must not exceed lr (0.1), got 0.5"),
    (["--task", "ner"], "argument --task: invalid choice: 'ner'"),
    (["--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
    (["--train", "/no/such/corpus"], "--train: /no/such/corpus does not exist"),
    (["translate", "--checkpoint", "r", "--beam", "0"], "--beam must be >= 1, got 0"),
])
def test_bad_flag_values_exit_2_with_one_clear_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_values_in_a_real_process_print_no_traceback():
    done = run_py("--dropout", "1.5", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "run.py: error: --dropout: must be in [0, 1), got 1.5"
    assert "Traceback" not in done.stderr


def test_gpus_without_gpus_names_what_is_visible_and_suggests_workers():
    done = run_py("--gpus", "2", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("run.py: error: --gpus 2: ")
    assert "visible" in line and line.endswith("--workers 2")


def test_a_malformed_corpus_line_is_named_by_file_and_line(tmp_path, capsys):
    corpus = tmp_path / "bad.txt"
    corpus.write_text("the/DT dog/NN ./.\nthe/DT brokentoken\n", encoding="utf-8")
    assert main(["--train", str(corpus), "--format", "slash", "--steps", "1", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert f"run.py: error: {corpus}:2: token 'brokentoken' is not word/TAG" in err


def test_inference_on_a_missing_run_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["tag", "--checkpoint", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().err.strip() == f"run.py tag: error: --checkpoint {tmp_path / 'nowhere'}: no such run " \
                                              f"directory"
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p.png")]) == 1
    assert "no metrics.jsonl" in capsys.readouterr().err

