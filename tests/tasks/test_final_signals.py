"""A real SIGTERM (or SIGHUP: a closed terminal) to a real `run.py` while it translates the held-out sets with the best
checkpoint (after training): the decoding stops, summary.json says what was skipped, run.lock is released, exit 130;
the same command with --resume runs only that decoding (no worker, no update) and completes the summary."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hogwild.data.synthetic import synthetic_parallel
from hogwild.tasks.cli import main
from tests.tasks.helpers import REPO

pytestmark = pytest.mark.slow


def _write_test_set(prefix, count):
    """prefix.src / prefix.tgt: the synthetic task's languages, so that the beam decoding of --test takes a while."""
    pairs = synthetic_parallel(count, seed=5)
    prefix.with_name(prefix.name + ".src").write_text("".join(" ".join(s) + "\n" for s, _ in pairs))
    prefix.with_name(prefix.name + ".tgt").write_text("".join(" ".join(t) + "\n" for _, t in pairs))


def _start_nmt_run(tmp_path, steps, eval_every):
    """A real run.py on the synthetic NMT task with a --test set whose beam decoding takes a while (and 20 held-out
    sentences of the 200, evaluated and decoded first): (its command, its environment, the running process), its run
    in tmp_path / "run"."""
    out, test = tmp_path / "run", tmp_path / "test"
    _write_test_set(test, 2000)
    command = [sys.executable, str(REPO / "run.py"), "--task", "nmt", "--synthetic-size", "200", "--workers", "1",
               "--steps", str(steps), "--eval-every", str(eval_every), "--dev-limit", "20", "--beam", "5", "--test",
               str(test), "--no-progress", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache")}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return command, env, process


@pytest.mark.parametrize("signum, resume", [(signal.SIGTERM, True), (signal.SIGHUP, False)], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_the_final_decoding_leaves_a_summary_and_resume_finishes_it(tmp_path, capsys, signum, resume):
    """Either signal leaves the same summary; the --resume that finishes the decoding (the same whichever signal
    stopped it) is run once, after SIGTERM."""
    out = tmp_path / "run"
    command, env, process = _start_nmt_run(tmp_path, steps=5, eval_every=1000)
    try:
        deadline = time.time() + 240
        while not (out / "dev.src").exists():  # written when the final held-out decoding begins
            assert process.poll() is None, process.communicate()
            assert time.time() < deadline, "the final decoding did not begin within 240 s"
            time.sleep(0.05)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == (f"signal {signal.Signals(signum).name} during the final held-out evaluation, "
                                      f"which was skipped (training had stopped: max_steps)")
    assert summary["training_stop_reason"] == "max_steps" and summary["heldout"] is None
    assert summary["updates"] == 5 and summary["final_train_loss"] is not None
    assert not (out / "run.lock").exists() and not (out / "test.hyp").exists()
    assert f"--resume --out {out} runs the final held-out evaluation" in stdout
    if not resume:
        return

    records = (out / "metrics.jsonl").read_text()
    _write_test_set(tmp_path / "test", 20)  # 2,000 sentences let the decoding be signalled; 20 finish it sooner
    done = subprocess.run([*command, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "training finished at update 5 (max_steps); running the final held-out evaluation that was skipped" \
        in done.stdout
    assert "workers ready" not in done.stdout + done.stderr  # nothing was trained
    assert (out / "metrics.jsonl").read_text() == records
    finished = json.loads((out / "summary.json").read_text())
    assert finished["stop_reason"] == "max_steps" and "training_stop_reason" not in finished
    assert finished["heldout"]["test"]["sentences"] == 20 and finished["heldout"]["dev"]["sentences"] == 20
    assert {key: finished[key] for key in ("updates", "wall_seconds", "best", "final_train_loss")} == \
        {key: summary[key] for key in ("updates", "wall_seconds", "best", "final_train_loss")}
    assert len((out / "test.hyp").read_text().splitlines()) == 20
    assert len((out / "command.txt").read_text().splitlines()) == 2 and not (out / "run.lock").exists()
    capsys.readouterr()
    assert main([*command[2:], "--resume"]) == 1  # now finished: nothing to train, nothing to decode (in process)
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("run.py: error: --steps 5: ")


def test_while_the_data_loads_sigterm_and_sighup_interrupt_as_ctrl_c_does():
    """Before the engine handles signals (run.py loading the data), SIGTERM and SIGHUP raise KeyboardInterrupt, which
    run.py turns into "interrupted", exit 130, run.lock released; the previous handler returns after the block. In a
    process of its own (SIGHUP detaches a terminal), one block after the other."""
    code = ("import os, signal, time\nfrom hogwild.tasks.final_signals import stops_as_interrupt\n"
            "for signum in (signal.SIGTERM, signal.SIGHUP):\n    before = signal.getsignal(signum)\n    try:\n"
            "        with stops_as_interrupt():\n            os.kill(os.getpid(), signum)\n            time.sleep(5)\n"
            "    except KeyboardInterrupt:\n"
            "        print(signum.name, 'interrupted', signal.getsignal(signum) is before)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "SIGTERM interrupted True\nSIGHUP interrupted True\n", "")


def test_one_sigterm_as_training_ends_is_the_first_and_skips_the_final_decoding(tmp_path):
    """One SIGTERM while the run stops at --steps (the engine's stop record written, its evaluation and last.pt under
    way) was answered "SIGTERM again: already stopping", then the whole final beam decoding ran, exit 0. It is the
    first signal: the decoding is skipped as documented, exit 130. (The engine's part of this, deterministic, is
    tests/hogwild/parent/test_supervisor.py::test_the_first_signal_after_training_ended_is_not_called_again_and_is_
    handed_on; here the signal may also land just after the engine, where FinalSignals takes it.)"""
    out = tmp_path / "run"
    *_, process = _start_nmt_run(tmp_path, steps=6, eval_every=5)
    try:
        deadline = time.time() + 240
        while '"kind": "stop"' not in ((out / "metrics.jsonl").read_text() if (out / "metrics.jsonl").exists() else ""):
            assert process.poll() is None, process.communicate()
            assert time.time() < deadline, "training did not stop within 240 s"
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "again" not in stderr and "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == ("signal SIGTERM during the final held-out evaluation, which was skipped "
                                      "(training had stopped: max_steps)")
    assert summary["updates"] == 6 and summary["heldout"] is None and not (out / "test.hyp").exists()
