"""tasks.cli / run.py: every flag in --help with its default, bad flag values and bad input files end with one
clear line and a non-zero exit (no traceback), and --gpus on a machine without enough GPUs."""
import dataclasses
import json
import os
import re

import pytest

from hogwild.tasks import defaults
from hogwild.tasks.cli import main, run_options, tag_parser, train_parser, translate_parser
from hogwild.tasks.options import RunOptions
from hogwild.tasks.rundir import write_config

from tests.tasks.misuse_helpers import RunPyForker

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
    assert f"learning rate: the schedule's starting value (default: {defaults.LR_TEXT})" in flat  # the recipe table
    assert "(default: the recipe optimizer's: pos 0.1 (paper 0.03), nmt 0.001 (paper 0.1);" in flat
    assert "--no-progress a tqdm progress bar in the parent (default: on)" in flat


def test_every_run_option_is_a_flag_with_its_declared_default():
    parsed = vars(train_parser().parse_args([]))
    assert parsed.pop("config") is None
    assert RunOptions(**parsed) == RunOptions()
    assert set(parsed) == {f.name for f in dataclasses.fields(RunOptions)} - {"extra"}


def test_flags_parse_into_options():
    args = train_parser().parse_args(["--task", "nmt", "--gpus", "2", "--train", "a/train", "--lr", "0.5", "--steps",
                                      "10", "--mode", "sync", "--no-progress", "--distributed", "easgd", "--tester"])
    assert (args.task, args.gpus, args.train, args.lr, args.steps, args.mode) == ("nmt", 2, ["a/train"], 0.5, 10,
                                                                                 "sync")
    assert (args.progress, args.distributed, args.tester, args.workers, args.preset) == (False, "easgd", True, 2,
                                                                                         "small")
    for given, minutes in (([], 10.0), (["--checkpoint-minutes", "0.5"], 0.5), (["--checkpoint-minutes", "0"], None),
                           (["--checkpoint-minutes", "off"], None)):
        options = RunOptions(**{k: v for k, v in vars(train_parser().parse_args(given)).items() if k != "config"})
        assert options.resolved().engine_config(["cpu"]).checkpoint_minutes == minutes, given
    assert train_parser().parse_args(["--max-restarts", "3"]).max_restarts == 3
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
    (["--checkpoint-minutes", "soon"], "argument --checkpoint-minutes: must be a number, 0 or off; got"),
    (["--checkpoint-minutes", "-1"], "--checkpoint-minutes: must be >= 0, got -1.0"),
    (["--max-restarts", "-1"], "--max-restarts: must be >= 0, got -1"),
    (["--max-restarts", "1", "--data-assignment", "partition"], "--max-restarts: needs data_assignment='queue'"),
    (["--seed", "99999999999999999999"], "--seed: must be in [0, 4294967295], got 99999999999999999999"),
    (["--threads-per-worker", "0"], "--threads-per-worker: must be > 0, got 0"),
    (["--step", "5"], "--step: not a flag; flags are spelled out in full (did you mean --steps?)"),
    (["--eval-every-sec=5"], "--eval-every-sec: not a flag; flags are spelled out in full (did you mean "
                             "--eval-every-seconds?)"),
    (["tag", "--check", "r"], "--check: not a flag; flags are spelled out in full (did you mean --checkpoint?)"),
    (["--train", "/dev/zero"], "--train: /dev/zero is a character device, not a corpus file or folder"),
    (["--train", __file__, "--dev", "/dev/null"], "--dev: /dev/null is a character device, not a corpus file or folder"),
])
def test_bad_flag_values_exit_2_with_one_clear_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_fifo_is_not_a_corpus(tmp_path, capsys):
    os.mkfifo(tmp_path / "corpus")
    with pytest.raises(SystemExit) as exit_:
        main(["--train", str(tmp_path / "corpus")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"run.py: error: --train: {tmp_path}/corpus is a FIFO (named pipe), not a corpus file or folder")


@pytest.fixture(scope="module")
def forker():
    """run.py's real processes here, forked from one interpreter that imported its modules once; no GPU visible."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        with RunPyForker() as forker:
            yield forker


def test_bad_values_in_a_real_process_print_no_traceback(forker):
    done = forker.run("--dropout", "1.5", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "run.py: error: --dropout: must be in [0, 1), got 1.5"
    assert "Traceback" not in done.stderr


def test_gpus_without_gpus_names_what_is_visible_and_suggests_workers(forker):
    done = forker.run("--gpus", "2", timeout=120)
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
                                              f"directory (give the folder run.py wrote, or a checkpoint file in it)"
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p.png")]) == 1
    assert "no metrics.jsonl" in capsys.readouterr().err


def _a_run_directory(tmp_path, **values) -> tuple:
    options = RunOptions(**values).resolved()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, run=options.to_dict(), model={}, devices=["cpu"])
    return options, run_dir


def test_config_replays_a_run_directory_and_flags_override_it(tmp_path):
    options, run_dir = _a_run_directory(tmp_path, task="nmt", workers=3, steps=40, lr=0.002, seed=7,
                                        out=str(tmp_path / "run"), extra={"label": "x"})
    replayed = run_options(train_parser(), ["--config", str(run_dir)])
    assert replayed == dataclasses.replace(options, out=None)  # the replay goes to a new run directory
    assert replayed.resolved() == replayed  # every default was recorded
    config_json = run_options(train_parser(), ["--config", str(run_dir / "config.json"), "--out", "o", "--steps", "9"])
    assert config_json == dataclasses.replace(options, out="o", steps=9)  # the flags given win


def test_resume_continues_a_run_directory_with_its_own_options(tmp_path, capsys):
    options, run_dir = _a_run_directory(tmp_path, task="nmt", workers=3, steps=40, lr=0.002, seed=7,
                                        out=str(tmp_path / "run"), extra={"label": "x"})
    resumed = run_options(train_parser(), ["--resume", "--out", str(run_dir), "--steps", "80"])
    assert resumed == dataclasses.replace(options, out=str(run_dir), resume=True, steps=80)
    from_config = run_options(train_parser(), ["--config", str(run_dir), "--resume"])
    assert from_config == dataclasses.replace(options, out=str(run_dir), resume=True)
    fresh = tmp_path / "fresh"  # no config.json yet: nothing to replay, the flags alone
    assert run_options(train_parser(), ["--resume", "--out", str(fresh)]) == RunOptions(out=str(fresh), resume=True)
    (tmp_path / "options.yaml").write_text("task: nmt\n")
    with pytest.raises(SystemExit) as exit_:  # an options file is no run directory to continue
        run_options(train_parser(), ["--config", str(tmp_path / "options.yaml"), "--resume"])
    assert exit_.value.code == 2 and "--resume: needs --out DIR" in capsys.readouterr().err
    (run_dir / "config.json").write_text('{"run": {"lr": "fast"}}')
    with pytest.raises(SystemExit):
        run_options(train_parser(), ["--resume", "--out", str(run_dir)])
    assert f"--resume {run_dir / 'config.json'}: " in capsys.readouterr().err


@pytest.mark.parametrize("name, text", [
    ("options.yaml", "task: nmt\ntime-limit: 30\ntrain: tests/fixtures/data/tiny\nlr: 1\n"),
    ("options.toml", 'task = "nmt"\ntime_limit = 30\ntrain = ["tests/fixtures/data/tiny"]\nlr = 1\n'),
    ("options.json", '{"task": "nmt", "time_limit": 30, "train": ["tests/fixtures/data/tiny"], "lr": 1}'),
])
def test_config_reads_options_files(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    options = run_options(train_parser(), ["--config", str(tmp_path / name), "--workers", "1"])
    assert (options.task, options.time_limit, options.train, options.lr, options.workers) == (
        "nmt", 30, ["tests/fixtures/data/tiny"], 1, 1)


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "lr: 0.1\nlrr: 0.2\n", "--config {path}: unknown option 'lrr'"),
    ("bad.json", '{"run": {"task": "pos", "colour": "red"}}', "--config {path}: unknown option 'colour'"),
    ("bad.toml", "steps = 'ten'\n", "--config {path}: --steps: must be an integer, got 'ten'"),
    ("bad.yaml", "task: [pos\n", "--config {path}: not valid YAML: "),
    ("bad.json", "[1, 2]", "--config {path}: expected a mapping of option names to values, got list"),
    ("config.json", '{"run": "pos"}', "--config {path}: its 'run' section is a str, not a mapping of option names"),
    ("missing.yaml", None, "--config {path}: cannot read it (No such file or directory)"),
])
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(tmp_path, capsys, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(path)])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("run.py: error: " + message.format(path=path))


@pytest.mark.parametrize("text, message", [
    ('{"run": {\n  "task": "pos",\n  "lr": 0.01,,\n  "steps": 5}}', "--resume {path}:3:14: not valid JSON: "
                                                                   "Expecting property name enclosed in double quotes"),
    ('{"run": {\n  "task": "pos",\n  "lr"', "--resume {path}:3:7: not valid JSON: Expecting ':' delimiter"),
    ("", "--resume {path}:1:1: not valid JSON: Expecting value"),
    ('{"config": {"lr": 0.1}}', "--resume {path}: has no 'run' section (the options run.py recorded, which --resume "
                                "continues); restore it, or give the run's options with --config FILE"),
    ('{"run": ["pos"]}', "--resume {path}: its 'run' section is a list, not a mapping of option names to values (the "
                         "options run.py recorded); restore it, or give the run's options with --config FILE"),
    ('{"run": 5}', "--resume {path}: its 'run' section is an int, not a mapping of option names to values (the "
                   "options run.py recorded); restore it, or give the run's options with --config FILE"),  # "a int"
    ('{"run": null}', "--resume {path}: its 'run' section is null, not a mapping of option names to values (the "
                      "options run.py recorded); restore it, or give the run's options with --config FILE"),
])
def test_resume_refuses_a_broken_config_json_naming_file_line_and_column(tmp_path, capsys, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        run_options(train_parser(), ["--resume", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "run.py: error: " + message.format(path=path)
    assert path.read_text() == text


def test_a_replayed_value_is_named_with_its_file(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"run": {"task": "pos", "word_min_freq": 1}}))
    (tmp_path / "nan.yaml").write_text("lr: .nan\n")
    for argv, message in [
            (["--resume", "--out", str(tmp_path), "--task", "nmt"],
             f"--task nmt: {tmp_path / 'config.json'} records a --task pos run, and a resumed run keeps its task; "
             f"drop --task, or start a new run in another --out"),
            (["--config", str(tmp_path), "--task", "nmt"],
             f"--config {tmp_path / 'config.json'}: --word-min-freq: applies to --task pos only (NMT keeps the "
             f"--vocab-size most frequent words)"),
            (["--config", str(tmp_path / "nan.yaml")], f"--config {tmp_path / 'nan.yaml'}: --lr: must be a finite "
                                                       f"number, got nan"),
            (["--lr", "inf"], "--lr: must be a finite number, got inf")]:
        with pytest.raises(SystemExit) as exit_:
            run_options(train_parser(), argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == "run.py: error: " + message


def test_config_replays_a_real_run(tmp_path, forker):
    first = tmp_path / "first"
    done = forker.run("--synthetic-size", "60", "--steps", "4", "--workers", "1", "--no-progress", "--lr", "0.05",
                      "--out", str(first), timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    second = tmp_path / "second"
    done = forker.run("--config", str(first), "--out", str(second), timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads((folder / "config.json").read_text()) for folder in (first, second)]
    assert runs[1]["run"] == {**runs[0]["run"], "out": str(second)}
    assert {**runs[1]["config"], "checkpoint_dir": None} == {**runs[0]["config"], "checkpoint_dir": None}
    done = forker.run("--resume", "--out", str(first), "--steps", "8", timeout=240)  # the run's own options, continued
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resuming {first / 'last.pt'} at update 4" in done.stdout
    summary = json.loads((first / "summary.json").read_text())
    assert (summary["updates"], summary["segments"], summary["lr"]) == (8, 2, 0.05)


def test_plot_prints_the_file_it_writes(tmp_path, capsys):
    """--out a folder writes curves.png inside it, --out without a suffix NAME.png (as matplotlib does): the path
    printed is the file written (it printed the folder)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": 2.5}\n'
        '{"kind": "eval", "elapsed": 1.5, "updates": 10, "metrics": {"accuracy": 0.5}}\n')
    (tmp_path / "figures").mkdir()
    for out, written in [(tmp_path / "figures", tmp_path / "figures" / "curves.png"),
                         (tmp_path / "noext", tmp_path / "noext.png"), (tmp_path / "a.png", tmp_path / "a.png")]:
        assert main(["plot", str(run), "--out", str(out)]) == 0
        assert capsys.readouterr().out == f"{written}\n"
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--mode", "single", "--workers", "3"], "--workers 3: --mode single trains with one worker; drop --workers, or "
                                             "use --mode hogwild (or sync) for 3"),
    (["--tester"], "--tester: applies to multi-host runs only (--distributed ALGO, under mpiexec); this run is on one "
                   "host"),
    (["--servers", "2"], "--servers: applies to multi-host runs only (--distributed ALGO, under mpiexec); this run "
                         "is on one host"),
    (["--amp", "bf16"], "--amp: applies to GPU workers only (--gpus N); this run trains on CPU workers"),
    (["--tf32"], "--tf32: applies to GPU workers only (--gpus N); this run trains on CPU workers"),
    (["--workers-per-gpu", "2"], "--workers-per-gpu: applies to GPU workers only (--gpus N); this run trains on CPU "
                                 "workers"),
    (["--task", "nmt", "--length-bucket", "1000"], "--length-bucket: 1000 is above --max-len 50: every batch would "
                                                   "be padded to 1000 positions, longer than any pair; give at most "
                                                   "--max-len (a compiled step is served by 8)"),
    *[(["--task", "pos", name, value], f"{name}: applies to --task nmt only; this run is --task pos")
      for name, value in (("--train-limit", "100"), ("--max-len", "5"), ("--beam", "9"), ("--vocab-size", "100"))],
    (["--task", "nmt", "--separator", "_"], "--separator: applies to --task pos only; this run is --task nmt"),
    (["--dev", __file__], "--dev: applies to a --train corpus only; this run trains on the synthetic task"),
    (["--train", __file__, "--synthetic-size", "10"], "--synthetic-size: applies to the synthetic task only (no "
                                                      "--train); this run trains on --train"),
    (["--no-shard-data"], "--no-shard-data: applies to multi-host runs only (--distributed ALGO, under mpiexec); "
                          "this run is on one host"),
    (["--task", "nmt", "--subword-vocab-size", "100"], "--subword-vocab-size: applies with --subwords only; this run "
                                                       "trains on Moses words"),
    (["--momentum", "0.9"], "--momentum: applies to --optimizer msgd or nesterov only; this run's optimizer is sgd"),
    (["--task", "nmt", "--momentum", "0.5"], "--momentum: applies to --optimizer msgd or nesterov only; this run's "
                                             "optimizer is adam"),
    (["--optimizer", "adagrad", "--momentum", "0.5"], "--momentum: applies to --optimizer msgd or nesterov only; this "
                                                      "run's optimizer is adagrad"),
])
def test_a_flag_the_run_would_ignore_is_refused_naming_it(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        run_options(train_parser(), argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "run.py: error: " + message


def test_flags_that_act_are_accepted():
    assert run_options(train_parser(), ["--mode", "single"]).workers == 2  # the default: one worker is trained
    assert run_options(train_parser(), ["--mode", "single", "--workers", "1"]).mode == "single"
    assert run_options(train_parser(), ["--gpus", "1", "--amp", "bf16", "--tf32", "--workers-per-gpu", "2"]).tf32
    assert run_options(train_parser(), ["--distributed", "easgd", "--servers", "2", "--tester"]).servers == 2
    assert run_options(train_parser(), ["--task", "nmt", "--length-bucket", "50"]).length_bucket == 50
    assert run_options(train_parser(), ["--task", "nmt", "--max-len", "5", "--beam", "3"]).beam == 3
    assert run_options(train_parser(), ["--optimizer", "nesterov", "--momentum", "0.5"]).optimizer_args() == {
        "momentum": 0.5}
    assert run_options(train_parser(), ["--distributed", "eamsgd", "--momentum", "0.5"]).momentum == 0.5  # msgd
    hang = run_options(train_parser(), ["--distributed", "allreduce", "--hang-timeout", "10"])
    assert (hang.dist_config().timeout_seconds, hang.resolved().engine_config(["cpu"]).hang_timeout) == (10, 10)
    assert run_options(train_parser(), ["--distributed", "easgd", "--wire", "bf16"]).dist_config().wire == "bf16"
    assert run_options(train_parser(), ["--train", __file__, "--format", "slash", "--dev", os.path.dirname(__file__)]
                       ).format == "slash"


def test_every_warning_is_one_line_without_the_source_that_warned(tmp_path, capsys):
    """The project's own warnings (a damaged cache entry) as `run.py: warning: message`; a library's with its
    category and place; never Python's second line quoting the source (`  warnings.warn(...)`)."""
    import warnings

    from hogwild.data.cache import ArrayCache
    from hogwild.tasks import cli
    cache = ArrayCache(tmp_path)
    cache.path("k").write_text("not an entry\n")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = cli._warning_line("run.py")
        assert cache.load("k") is None
        warnings.warn_explicit("a library's\n  warning", DeprecationWarning, "/usr/lib/x.py", 7)
    assert capsys.readouterr().err.splitlines() == [
        f"run.py: warning: damaged cache entry {tmp_path / 'k'} (not a folder): rebuilding it",
        "run.py: warning: DeprecationWarning: a library's warning (/usr/lib/x.py:7)"]


def test_help_says_flags_are_spelled_out_in_full():
    assert ("flags are spelled out in full: a prefix (--step for --steps) is an error, so that a recorded command keeps "
            "its meaning when a later version adds flags") in " ".join(train_parser().format_help().split())


@pytest.mark.parametrize("argv, hint", [(["prepare", "europarl", "--src", "fr"], "; corpora are prepared with "
                                                                                "`python -m hogwild.data.prepare`"),
                                        (["train", "--steps", "2"], "")])
def test_a_word_that_is_not_a_command_is_named_not_its_first_flag(capsys, argv, hint):
    """`run.py prepare europarl --src fr` said "--src: not a flag ... (did you mean --src-lang?)"."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"run.py: error: {argv[0]!r} is not a command: run.py's commands are tag, translate, plot, and training takes "
        f"flags only{hint}")
