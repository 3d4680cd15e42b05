"""`run.py translate` and `run.py tag` on real run directories (subprocesses): translations are bounded as the
held-out evaluation is (a long line is cut, its translation capped), and both say which checkpoint they use and warn
when its run is still training."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.tasks.helpers import REPO, run_py


def test_input_lines_lose_a_byte_order_mark(tmp_path):
    from hogwild.tasks.inference import read_input
    source = tmp_path / "in.txt"
    source.write_bytes(b"\xef\xbb\xbfLe chat dort .\r\nBonjour .\n")
    assert read_input([str(source)]) == ["Le chat dort .", "Bonjour ."]
    assert read_input([str(source), str(source)])[2] == "Le chat dort ."  # at the start of each file


@pytest.fixture(scope="module")
def nmt_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nmt") / "run"
    done = run_py("--task", "nmt", "--synthetic-size", "200", "--workers", "1", "--steps", "5", "--beam", "2",
                  "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.slow
def test_a_long_line_is_cut_like_a_held_out_pair_and_its_translation_capped(nmt_run, tmp_path):
    words = " ".join((nmt_run / "dev.src").read_text().splitlines()).split()
    long_line = " ".join((words * (1000 // len(words) + 1))[:1000])  # 1,000 words of the task's vocabulary
    first_100 = " ".join(long_line.split()[:100])
    source = tmp_path / "in.txt"
    source.write_text(f"{long_line}\n{first_100}\n")
    started = time.monotonic()
    done = run_py("translate", "--checkpoint", str(nmt_run), "--beam", "5", str(source))
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120
    long_translation, short_translation = done.stdout.splitlines()
    assert long_translation == short_translation  # translated from its first 100 words, as evaluation cuts it
    assert 0 < len(long_translation.split()) <= 200  # DECODE_MAX_LEN
    best = json.loads((nmt_run / "summary.json").read_text())["best"]["update"]
    assert done.stderr.splitlines() == [
        f"run.py translate: using {nmt_run / 'best.pt'} (update {best})",
        "run.py translate: warning: 1 line(s) longer than 100 words were translated from their first 100 only "
        "(split long lines into sentences)"]


def test_translate_help_states_the_bound():
    done = run_py("translate", "--help")
    text = " ".join(done.stdout.split())
    assert ("a line longer than 100 words (units of the run's vocabulary) is translated from its first 100 (with a "
            "warning), and a translation has at most 2 x its source length + 10 words, never over 200.") in text


@pytest.mark.slow
def test_tag_on_a_run_still_training_names_the_checkpoint_and_warns(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache")}
    training = subprocess.Popen([sys.executable, str(REPO / "run.py"), "--task", "pos", "--synthetic-size", "200",
                                 "--workers", "1", "--time-limit", "300", "--eval-every", "100000", "--no-progress",
                                 "--out", str(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while not (out / "best.pt").exists():  # the evaluation of the starting parameters: update 0
            assert training.poll() is None and time.time() < deadline
            time.sleep(0.2)
        done = run_py("tag", "--checkpoint", str(out), input="The dog barks .\n")
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 1
        note, warning = done.stderr.splitlines()
        assert note == f"run.py tag: using {out / 'best.pt'} (update 0)"
        assert re.fullmatch(rf"run\.py tag: warning: {re.escape(str(out))} is still training \(pid {training.pid} "
                            rf"\(started [0-9: -]+\)\): best\.pt is the checkpoint of update 0, not of the finished "
                            rf"run", warning), warning
        training.send_signal(signal.SIGINT)
        assert training.wait(120) == 130
    finally:
        if training.poll() is None:
            training.kill()
            training.wait()
    best = json.loads((out / "summary.json").read_text())["best"]["update"]  # the stop's evaluation may be better
    done = run_py("tag", "--checkpoint", str(out), input="The dog barks .\n")
    assert done.returncode == 0 and done.stderr.splitlines() == [f"run.py tag: using {out / 'best.pt'} (update {best})"]
