"""scripts/train_serial.py, run as its docstring shows (`python -m scripts.train_serial` from the repository root), on
the synthetic tasks (seconds): run folder contents, update limits, both loops (plain and the hogwild engine in single
mode), and the learning-rate rule it shares with run.py (tasks.defaults)."""
import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO_ROOT

COMMAND = [sys.executable, "-m", "scripts.train_serial"]


def run(*args, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([*COMMAND, *args, "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, json.loads((out / "results.json").read_text())


def run_in_process(*args, tmp_path):
    """scripts.train_serial.main(ARGS): the same run folder as the command, without an interpreter importing torch
    (for what the run computes; the command line itself is test_pos_plain_loop_run_folder's and
    test_nmt_engine_loop_writes_translations')."""
    from scripts import train_serial

    out = tmp_path / "run"
    assert train_serial.main([*args, "--out", str(out)]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_pos_plain_loop_run_folder(tmp_path):
    out, results = run("--task", "pos", "--synthetic", "--loop", "plain", "--steps", "30", "--log-every", "10",
                       "--optimizer", "adam", "--batch-size", "16", "--lr", "0.01", tmp_path=tmp_path)
    assert results["updates"] == 30 and results["loop"] == "plain"
    assert 0.0 <= results["unk_accuracy"] <= 1.0 and results["accuracy"] > 0.5
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "train_loss" in r] == [10, 20, 30]
    assert json.loads((out / "config.json").read_text())["steps"] == 30
    assert (out / "command.txt").read_text().startswith("python -m scripts.train_serial --task pos --synthetic")


def test_sgd_takes_the_task_rule_for_its_schedule_in_both_loops(tmp_path):
    """POS + SGD without --lr-decay, paper recipe: the paper's decay 0.0135 per epoch, floored at 1% of lr (as
    run.py decides). The plain loop's run folder (main, in process); the engine loop's config.json is the same parse
    (parse_args, before the loops part), read here in process: the engine's training with that schedule is
    test_one_engine_worker_and_the_plain_loop_are_the_same_run's, its command line test_nmt_engine_loop's."""
    from scripts import train_serial

    expected = {"lr_schedule": "linear_decay", "decay_per_epoch": 0.0135, "decay_updates": None, "warmup_steps": 0,
                "min_lr": 0.0003}
    flags = ["--task", "pos", "--synthetic", "--optimizer", "sgd", "--steps", "4", "--log-every", "2", "--recipe",
             "paper"]
    out, results = run_in_process(*flags, "--loop", "plain", tmp_path=tmp_path)
    engine = train_serial.recorded(train_serial.parse_args([*flags, "--loop", "engine", "--out", str(tmp_path / "e")]))
    for config in (json.loads((out / "config.json").read_text()), engine):
        assert config["schedule"] == pytest.approx(expected) and (config["lr"], config["lr_decay"]) == (0.03, 0.0135)
    assert results["updates"] == 4
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in lines if "train_loss" in r] == [0.03, 0.03]  # epoch 0: the full rate


def test_default_recipe_counts_its_decay_in_updates(tmp_path):
    out, results = run_in_process("--task", "pos", "--synthetic", "--optimizer", "sgd", "--loop", "plain", "--steps",
                                  "4", "--log-every", "2", tmp_path=tmp_path)
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "default" and (config["lr"], config["lr_decay"]) == (0.1, 0.0225)
    assert config["schedule"] == pytest.approx({"lr_schedule": "linear_decay", "decay_per_epoch": 0.0225,
                                                "decay_updates": 40_000, "warmup_steps": 0, "min_lr": 0.001})
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in lines if "train_loss" in r] == pytest.approx([0.1 - 0.0225 * 2 / 40_000,
                                                                           0.1 - 0.0225 * 4 / 40_000], abs=1e-15)


@pytest.mark.slow
def test_nmt_engine_loop_writes_translations(tmp_path):
    out, results = run("--task", "nmt", "--synthetic", "--loop", "engine", "--steps", "5", "--beam", "2",
                       tmp_path=tmp_path)
    assert results["updates"] == 5 and results["loop"] == "engine" and results["stop_reason"] == "max_steps"
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    for name in ("greedy", "beam2"):
        assert len((out / f"test.{name}.hyp").read_text().splitlines()) == results["test_counts"]["kept"] == 200


def test_bad_arguments_exit_with_a_message(tmp_path, capsys):
    """Each refused before anything is written: exit status 2 and one line naming the flag (in process: the
    command line itself is run by the tests above)."""
    from scripts import train_serial

    for argv, message in ((["--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
                          (["--corpora", str(tmp_path / "none")], f"--train: {tmp_path / 'none' / 'brown'} does not "
                                                                   "exist"),
                          (["--synthetic", "--lr", "1e-5", "--lr-decay", "-1"], "--lr-decay: must be >= 0, got -1.0"),
                          (["--synthetic", "--loop", "plain", "--optimizer", "rmsprop"],
                           "--optimizer: the plain loop steps with sgd or adam (torch.optim), got 'rmsprop'")):
        with pytest.raises(SystemExit) as exit_:
            train_serial.main(["--task", "pos", *argv, "--out", str(tmp_path / "run")])
        assert exit_.value.code == 2 and message in capsys.readouterr().err, argv
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_engine_worker_and_the_plain_loop_are_the_same_run(tmp_path, optimizer):
    """Both loops train on the same fixed batches in the engine's order (hogwild.feed.tickets.epoch_order) and per-batch
    RNG seeds, over 2 epochs of 5 batches (so the order changes between epochs) with dropout on and sgd's decaying
    rate."""
    from scripts import train_serial

    finals, logs = {}, {}
    for loop in ("plain", "engine"):
        args = train_serial.parse_args(["--task", "pos", "--synthetic", "--synthetic-size", "40", "--batch-size", "8",
                                        "--epochs", "2", "--optimizer", optimizer, "--dropout", "0.2", "--seed", "3",
                                        "--log-every", "5", "--loop", loop, "--out", str(tmp_path / loop)])
        job = train_serial.pos_job(args)
        assert len(job.batches) == 5
        logs[loop] = []
        summary = (train_serial.train if loop == "plain" else train_serial.train_with_engine)(job, args,
                                                                                               logs[loop].append)
        assert summary["updates"] == 10
        finals[loop] = [p.detach().clone() for p in job.model.parameters()]
    for plain, engine in zip(finals["plain"], finals["engine"]):
        torch.testing.assert_close(engine, plain, rtol=1e-6, atol=1e-7)
    untrained = train_serial.pos_job(args).model.parameters()
    assert all(not torch.equal(p, q) for p, q in zip(finals["plain"], untrained))  # every tensor trained
