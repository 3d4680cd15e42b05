"""`run.py translate` and `run.py tag` on real run directories (subprocesses): both stream (an endless input is
answered line after line in bounded memory, a line typed is answered at once), translations are bounded as the
held-out evaluation is (a long line is cut, its translation capped), and both say which checkpoint they use and warn
when its run is still training."""
import json
import os
import re
import queue
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from hogwild.tasks.cli import main
from tests.tasks.helpers import REPO, run_py


@pytest.fixture(scope="module")
def nmt_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nmt") / "run"
    done = run_py("--task", "nmt", "--synthetic-size", "200", "--workers", "1", "--steps", "5", "--beam", "2",
                  "--dev-limit", "20", "--out", str(out), "--no-progress")  # 20 of the 200 held-out pairs to decode
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def pos_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pos") / "run"
    done = run_py("--task", "pos", "--synthetic-size", "200", "--workers", "1", "--steps", "5", "--out", str(out),
                  "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


MEMORY_CAP = 3 << 30  # address space: the process needs about 0.8 GiB; reading an endless input whole passed 4 GiB


@pytest.mark.slow
@pytest.mark.parametrize("command", ["tag", "translate"])
def test_an_endless_input_is_answered_as_it_arrives_in_bounded_memory(command, pos_run, nmt_run):
    """One line is answered while the input stays open (the command does not wait for more, nor for the end); then
    an endless input (as `yes`) is answered line after line under a cap on the process's memory, until killed."""
    run = pos_run if command == "tag" else nmt_run
    line = (nmt_run / "dev.src").read_text().splitlines()[0] if command == "translate" else "ta lavial dulodium ."
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE",
                                                                                  "/tmp/hogwild-test-cache")}
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), command, "--checkpoint", str(run)], cwd=REPO,
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP)))
    answers = queue.Queue()
    threading.Thread(target=lambda: [answers.put(line) for line in process.stdout], daemon=True).start()
    try:
        process.stdin.write(f"{line}\n".encode())
        process.stdin.flush()
        first = _lines_within(answers, 1, 120)  # torch's import on a busy machine, then at once
        threading.Thread(target=_feed_forever, args=(process.stdin, f"{line}\n".encode() * 1000), daemon=True).start()
        more = _lines_within(answers, 600, 120)  # past two chunks of 256 lines
        assert process.poll() is None  # still reading
        assert len(set(first + more)) == 1 and first[0].strip()  # the same answer to the same line, each time
    finally:
        process.kill()
        process.wait()


def _feed_forever(stream, block: bytes) -> None:
    try:
        while True:
            stream.write(block)
    except (BrokenPipeError, ValueError, OSError):
        pass  # the process was killed


def _lines_within(answers: queue.Queue, count: int, seconds: float) -> list[bytes]:
    lines, deadline = [], time.monotonic() + seconds
    while len(lines) < count:
        try:
            lines.append(answers.get(timeout=max(deadline - time.monotonic(), 0.01)))
        except queue.Empty:
            raise AssertionError(f"{len(lines)} of {count} answers within {seconds} s") from None
    return lines


@pytest.mark.slow
def test_a_long_line_is_cut_like_a_held_out_pair_and_its_translation_capped(nmt_run, tmp_path, capsys):
    words = " ".join((nmt_run / "dev.src").read_text().splitlines()).split()
    long_line = " ".join((words * (1000 // len(words) + 1))[:1000])  # 1,000 words of the task's vocabulary
    first_100 = " ".join(long_line.split()[:100])
    source = tmp_path / "in.txt"
    source.write_text(f"{long_line}\n{first_100}\n")
    started = time.monotonic()
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(nmt_run), "--beam", "5", str(source)]) == 0  # in this process
    assert time.monotonic() - started < 120
    done = capsys.readouterr()
    long_translation, short_translation = done.out.splitlines()
    assert long_translation == short_translation  # translated from its first 100 words, as evaluation cuts it
    assert 0 < len(long_translation.split()) <= 200  # DECODE_MAX_LEN
    best = json.loads((nmt_run / "summary.json").read_text())["best"]["update"]
    assert done.err.splitlines() == [
        f"run.py translate: using {nmt_run / 'best.pt'} (update {best})",
        "run.py translate: warning: 1 line(s) longer than 100 words were translated from their first 100 only "
        "(split long lines into sentences)"]


def test_translate_help_states_the_bound(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["translate", "--help"])  # in this process
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("a line longer than 100 words (units of the run's vocabulary) is translated from its first 100 (with a "
            "warning), and a translation has at most 2 x its source length + 10 words, never over 200.") in text


@pytest.mark.slow
def test_tag_on_a_run_still_training_names_the_checkpoint_and_warns(tmp_path, capsys):
    """run.py tag called in this process (the warning is about the training process, a real one, and its lock)."""
    out, sentence = tmp_path / "run", tmp_path / "in.txt"
    sentence.write_text("The dog barks .\n")
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
        capsys.readouterr()
        assert main(["tag", "--checkpoint", str(out), str(sentence)]) == 0
        done = capsys.readouterr()
        assert len(done.out.splitlines()) == 1
        note, warning = done.err.splitlines()
        assert note == f"run.py tag: using {out / 'best.pt'} (update 0)"
        assert re.fullmatch(rf"run\.py tag: warning: {re.escape(str(out))} is still training, by pid {training.pid} "
                            rf"\(started [0-9: -]+\): best\.pt is the checkpoint of update 0, not of the finished "
                            rf"run", warning), warning
        training.send_signal(signal.SIGINT)
        assert training.wait(120) == 130
    finally:
        if training.poll() is None:
            training.kill()
            training.wait()
    best = json.loads((out / "summary.json").read_text())["best"]["update"]  # the stop's evaluation may be better
    assert main(["tag", "--checkpoint", str(out), str(sentence)]) == 0
    assert capsys.readouterr().err.splitlines() == [f"run.py tag: using {out / 'best.pt'} (update {best})"]


@pytest.mark.parametrize("closed, args, message", [
    (1, [], "stdout is closed: the answers would go nowhere; give --output FILE"),
    (0, ["-"], "stdin is closed: there is nothing to read; give the input FILEs")])
def test_a_closed_stream_that_tag_would_use_is_an_error(pos_run, tmp_path, closed, args, message):
    """`run.py tag ... >&-` wrote its answers to /dev/null and exited 0 (a training run needs no stdout; tag's
    answers are its product); `<&-` answered an empty input. Refused before the run is loaded, naming the stream."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO / "run.py"), "tag", "--checkpoint", str(pos_run), *args],
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(closed))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"run.py tag: error: {message}"


@pytest.mark.slow
def test_sigterm_while_tagging_into_output_leaves_no_partial_file(pos_run, tmp_path):
    """--output is written beside its place and renamed at the end: SIGTERM (as SIGINT) stops the command, exit 130,
    and removes that file (it was left as out.txt.XXXX.tmp)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), "tag", "--checkpoint", str(pos_run),
                                "--output", str(tmp_path / "out.txt")], cwd=REPO, env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        process.stdin.write(b"ta lavial dulodium .\n")
        process.stdin.flush()
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("out.txt.*.tmp")):  # tagging into the file beside out.txt
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 130
        assert process.stderr.read().decode().splitlines()[-1] == "run.py tag: interrupted"
        assert list(tmp_path.iterdir()) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _fake_run(folder):
    """The files of a trained run, by name (output_clash reads no content)."""
    folder.mkdir()
    for name in ("model.json", "config.json", "metrics.jsonl", "last.pt", "best.pt", "vocab.words.json"):
        (folder / name).write_text(name)
    (folder / "host0").mkdir()
    (folder / "host0" / "last.pt").write_text("host0")
    return folder


def test_an_output_on_a_file_of_the_run_or_on_the_input_is_refused_by_any_path(tmp_path):
    """--output RUN/last.pt (metrics.jsonl, a vocabulary ...) replaced the run's file with the answers, exit 0; so did
    a link to it or another name for it (files are compared by device and inode), a name the run writes later, and
    the input file itself. A new name beside the run, a device and a file elsewhere are written as before."""
    from hogwild.tasks.inference import output_clash

    run = _fake_run(tmp_path / "run")
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    (tmp_path / "link.pt").symlink_to(run / "last.pt")
    os.link(run / "best.pt", tmp_path / "hard.pt")
    (tmp_path / "alias").symlink_to(run)
    refused = {str(run / "last.pt"): "", str(run / "metrics.jsonl"): "", str(run / "host0" / "last.pt"): "",
               str(run / "summary.json"): "",  # not written yet: the run writes it at its end
               str(tmp_path / "link.pt"): f"is {run / 'last.pt'}, ",
               str(tmp_path / "hard.pt"): f"is {run / 'best.pt'}, ",
               str(tmp_path / "alias" / "vocab.words.json"): f"is {run / 'vocab.words.json'}, ",
               str(tmp_path / "alias" / "best.pt"): f"is {run / 'best.pt'}, ",  # best.pt is run/best.pt and hard.pt
               str(tmp_path / "alias" / "summary.json"): f"is {run / 'summary.json'}, "}
    for output, other in refused.items():
        for checkpoint in (run, run / "best.pt", run / "host0" / "last.pt"):
            assert output_clash(output, str(checkpoint), [str(source)]) == (
                f"--output {output}: {other}a file of the --checkpoint run {run}: the answers would replace it; write "
                f"them outside the run directory")
    assert output_clash(str(source), str(run), ["-", str(source)]) == (
        f"--output {source}: is the input {source}: the answers would replace it; write them to another file")
    for output in (str(run / "answers.txt"), str(tmp_path / "out.txt"), os.devnull, None):
        assert output_clash(output, str(run), [str(source)]) is None


@pytest.mark.parametrize("command, target, stdin", [("tag", "last.pt", None), ("tag", "config.json", "stdout"),
                                                    ("tag", "in", "stdin"), ("translate", "vocab.src.json", None)])
def test_run_py_refuses_an_output_on_its_run_or_input_and_touches_nothing(command, target, stdin, pos_run, nmt_run,
                                                                          tmp_path):
    """The reported cases, end to end: exit 2 before the run is loaded; every file of the run and the input stay
    byte for byte (`--output /dev/stdout >> RUN/config.json` and `--output /dev/stdin < in.txt` too)."""
    run = pos_run if command == "tag" else nmt_run
    source = tmp_path / "in.txt"
    source.write_text("ta lavial dulodium .\n")
    before = {path: path.read_bytes() for path in [*run.iterdir(), source]}
    output = {"stdout": "/dev/stdout", "stdin": "/dev/stdin"}.get(stdin, str(run / target))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(run / target if stdin == "stdout" else source, "ab" if stdin == "stdout" else "rb") as stream:
        done = subprocess.run([sys.executable, str(REPO / "run.py"), command, "--checkpoint", str(run), "--output",
                               output, *([] if stdin else [str(source)])], cwd=REPO, env=env, timeout=120,
                              stdin=stream if stdin == "stdin" else subprocess.DEVNULL,
                              stdout=stream if stdin == "stdout" else subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    assert done.returncode == 2
    named = "is the input stdin" if stdin == "stdin" else f"is {run / target}, a file" if stdin else "a file"
    assert done.stderr.splitlines()[-1].startswith(f"run.py {command}: error: --output {output}: {named}")
    assert {path: path.read_bytes() for path in [*run.iterdir(), source]} == before


def test_a_run_file_that_cannot_be_parsed_is_named_with_its_path(nmt_run, tmp_path):
    """`translate --output RUN/vocab.src.json` left a file that the next translate refused with json's bare
    "Expecting value: line 1 column 1 (char 0)". Each file tag/translate read is named, with line and column."""
    import shutil

    from hogwild.tasks.inference import load_translator
    from hogwild.tasks.rundir import RunDirError

    run = tmp_path / "run"
    shutil.copytree(nmt_run, run)
    damages = {"vocab.src.json": ("Das Haus\n", "vocab.src.json:1:1: not valid JSON (Expecting value)"),
               "vocab.tgt.json": ("[1]", 'vocab.tgt.json: not a vocabulary file (a JSON object {"specials": [...], '
                                         '"tokens": [...]} of strings)'),
               "text.json": ('{"kind": "moses",\n "src_lang": }', "text.json:2:14: not valid JSON (Expecting value)"),
               "model.json": (b"\xff", "model.json: not JSON text (byte 0 is not utf-8)"),
               }
    for name, (text, message) in damages.items():
        kept = (run / name).read_bytes()
        (run / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ValueError) as raised:
            load_translator(run)
        assert str(raised.value) == f"{run}/{message}"
        (run / name).write_bytes(kept)
    spec = (run / "model.json").read_text()
    (run / "model.json").write_text(json.dumps({**json.loads(spec), "config": {**json.loads(spec)["config"],
                                                                               "readout": 7}}))
    with pytest.raises(RunDirError, match=rf"^{run}/model\.json and {run}/best\.pt do not make one model "
                                          r"\(RuntimeError: Error\(s\) in loading state_dict for AttentionNMT: size "
                                          r"mismatch for .*\); is one of them from another run\?$"):
        load_translator(run)
    (run / "model.json").write_text(spec)
    (run / "vocab.src.json").write_text("x")
    done = run_py("translate", "--checkpoint", str(run), input="a b\n")
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        1, f"run.py translate: error: {run}/vocab.src.json:1:1: not valid JSON (Expecting value)")
