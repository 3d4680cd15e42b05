"""Real processes, real signals, a real full disk: two runs on one --out (the second is refused, naming the first),
a run killed with SIGKILL (its lock is taken over by --resume; one killed before its first checkpoint is not started
afresh over by --resume), a torn metrics line (plot reads the run, --resume repairs it), a run on a full disk (it
stops naming the file; metrics.jsonl holds whole records only), a killed worker replaced (--max-restarts), and runs
whose standard streams are closed, full, or read by a reader that goes away."""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hogwild.tasks.cli import main
from tests.tasks.helpers import REPO
from tests.tasks.misuse_helpers import fingerprint, run_py_session
from tests.worker_processes import worker_pids

pytestmark = pytest.mark.slow

TASK = ["--task", "pos", "--synthetic-size", "200", "--no-progress"]
SMALL = [*TASK, "--workers", "1"]  # one worker to spawn where the test needs no second
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
       "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache")}


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_second_run_on_the_same_out_is_refused_and_a_killed_runs_lock_is_taken_over(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, str(REPO / "run.py"), *SMALL, "--time-limit", "300",
                              "--checkpoint-every", "20", "--out", str(out)], cwd=REPO, env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 180
        while not (out / "last.pt").exists():  # training is under way
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.2)
        second = run_py_session(*SMALL, "--steps", "10", "--resume", "--out", str(out))
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1].startswith(
            f"run.py: error: --out {out}: run directory is in use by pid {first.pid} (started ")
        assert len((out / "command.txt").read_text().splitlines()) == 1  # the second run wrote nothing
        os.killpg(first.pid, signal.SIGKILL)  # the whole run, parent and workers, as the OOM killer might
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert json.loads((out / "run.lock").read_text())["pid"] == first.pid  # left behind
    step = torch_step(out / "last.pt")
    third = run_py_session(*SMALL, "--steps", str(step + 10), "--resume", "--out", str(out))
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"took over the lock of pid {first.pid} (no longer running)" in third.stdout
    assert f"resuming {out / 'last.pt'} at update {step}" in third.stdout
    assert not (out / "run.lock").exists()
    assert third.leftover_processes == [] and third.leftover_shm == []


def torch_step(path):
    from hogwild.share.checkpoint import read_checkpoint
    return int(read_checkpoint(str(path))["global_step"])


def test_a_torn_metrics_line_is_read_past_by_plot_and_repaired_by_resume(tmp_path):
    out = tmp_path / "run"
    assert run_py_session(*SMALL, "--steps", "20", "--eval-every", "10", "--out", str(out)).returncode == 0
    metrics = out / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + '{"kind": "train", "time": 17')  # what a crash in the middle of a write leaves
    assert main(["plot", str(out), "--out", str(tmp_path / "curves.png")]) == 0  # run.py plot, in process
    resumed = run_py_session(*SMALL, "--steps", "40", "--eval-every", "10", "--resume", "--out", str(out))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    text = metrics.read_text()
    assert text.startswith(whole) and text.endswith("\n")
    records = _records(metrics)
    repaired = [r for r in records if r["kind"] == "repaired"]
    assert len(repaired) == 1 and repaired[0]["dropped_bytes"] == len('{"kind": "train", "time": 17')
    assert main(["plot", str(out), "--out", str(tmp_path / "curves.png")]) == 0


@pytest.fixture
def small_disk(tmpfs):
    """A 1 MiB tmpfs: room for the run's first files, not for its checkpoints."""
    return tmpfs("1m")


def test_a_full_disk_stops_the_run_naming_the_file(small_disk):
    out = small_disk / "run"
    done = run_py_session(*SMALL, "--steps", "40", "--eval-every", "10", "--out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"run.py: error: {out}/best.pt: cannot write: no space left on device ("), last
    assert "Traceback" not in done.stderr and "enforce fail" not in done.stderr
    assert done.leftover_processes == [] and done.leftover_shm == []
    assert all(r["kind"] for r in _records(out / "metrics.jsonl"))  # whole records only
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
    assert not (out / "run.lock").exists()
    before = fingerprint(out)
    again = run_py_session(*SMALL, "--steps", "40", "--out", str(out))  # refused before writing anything
    assert again.returncode == 1 and fingerprint(out) == before


def test_a_start_refused_by_a_small_dev_shm_leaves_nothing_that_blocks_the_retry(tmp_path):
    """The engine's /dev/shm check refuses after run.py wrote model.json and config.json: those go again, so the
    same command is refused for the same reason (it said "already holds a run; add --resume"), and an --out folder
    that existed (empty) is left as it was."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to give run.py a 1 MiB /dev/shm of its own")
    existing = tmp_path / "existing"
    existing.mkdir()
    for out in (tmp_path / "new", tmp_path / "new", existing):
        command = shlex.join([sys.executable, str(REPO / "run.py"), *SMALL, "--steps", "5", "--out", str(out)])
        done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs /dev/shm && {command}"],
                              cwd=REPO, env=ENV, capture_output=True, text=True, timeout=240)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("run.py: error: /dev/shm has 1.0 MiB free, but "), \
            done.stderr
    assert not (tmp_path / "new").exists() and list(existing.iterdir()) == []


def test_max_restarts_replaces_a_killed_worker_and_the_summary_counts_it(tmp_path):
    """--max-restarts 1: a worker killed with kill -9 mid-run is replaced, the run reaches exactly --steps, exit 0,
    and summary.json counts the restart (metrics.jsonl names the worker); after a --resume it still counts the whole
    run's restarts (it said 0)."""
    out = tmp_path / "run"
    process, worker, stdout, stderr = _kill_a_worker_mid_run(out, "--steps", "300", "--max-restarts", "1")
    assert process.returncode == 0, stdout + stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["restarts"], summary["updates"], summary["stop_reason"]) == (1, 300, "max_steps")
    [restart] = [r for r in _records(out / "metrics.jsonl") if r["kind"] == "restart"]
    assert restart["reason"].endswith(f"pid {worker}) was killed by signal SIGKILL")
    assert "restarting worker " in stderr and "(1 of --max-restarts 1)" in stderr
    rate = f"{summary['updates_per_second']:.2f} updates/s, start-up excluded"  # the headline rate, as summary.json's
    assert f"done (max_steps): 300 updates in {summary['wall_seconds']:.1f} s of training ({rate})," in stdout
    resumed = run_py_session("--steps", "320", "--resume", "--out", str(out))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["restarts"], summary["updates"], summary["segments"]) == (1, 320, 2)
    rate = f"{summary['updates_per_second']:.2f} updates/s, start-up excluded"
    assert (f"done (max_steps): 320 updates in {summary['wall_seconds']:.1f} s of training over 2 segments (this one: "
            f"20 updates, {rate}),") in resumed.stdout


def _kill_a_worker_mid_run(out, *args, workers=2):
    """run.py with `workers` workers in its own session; once 20 updates are logged one worker is killed with SIGKILL.
    Returns (the finished process, the killed worker's pid, stdout, stderr)."""
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), *TASK, "--workers", str(workers),
                                "--log-every", "10", *args, "--out", str(out)], cwd=REPO, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        while not any(r["kind"] == "train" and r["updates"] >= 20 for r in _records_so_far(out / "metrics.jsonl")):
            assert process.poll() is None and time.time() < deadline, process.communicate()
            time.sleep(0.05)
        worker = _worker_of(process.pid)
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process, worker, stdout, stderr


def _records_so_far(path):
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _worker_of(pid):
    """A worker process of run.py `pid` (spawned, or forked from its fork server)."""
    workers = worker_pids(pid)
    assert workers, f"no worker process of pid {pid}"
    return workers[0]


def test_a_reader_that_closes_the_output_pipe_does_not_stop_the_run(tmp_path):
    """`run.py ... | head -2`: once the reader has gone, every line written (progress, evaluations, warnings) would
    meet a closed pipe; the run goes on silently to --steps and exits 0 (it stopped, blaming evaluate())."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), *SMALL, "--steps", "100", "--eval-every", "20",
                                "--log-every", "10", "--out", str(out)], cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        process.stdout.readline()
        process.stdout.close()  # the reader goes, as head does after its lines
        assert process.wait(timeout=180) == 0
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["updates"], summary["stop_reason"]) == (100, "max_steps")


def test_a_killed_worker_stops_the_run_with_its_name_and_how_to_continue(tmp_path):
    """Without --max-restarts a worker killed mid-run stops the run: exit 1, the worker named, last.pt written, and
    (as after Ctrl-C) the command that continues it. One worker: the others' stop is test_supervisor.py's."""
    out = tmp_path / "run"
    process, worker, stdout, stderr = _kill_a_worker_mid_run(out, "--steps", "100000", workers=1)
    assert process.returncode == 1, stdout + stderr
    error, hint = stderr.strip().splitlines()[-3:-2] + stderr.strip().splitlines()[-1:]
    assert error.startswith("run.py: error: training stopped: worker ") and f"pid {worker}) was killed" in error
    assert hint == f"run.py: the run is in {out / 'last.pt'}: continue with the same command plus --resume --out {out}"
    assert (out / "last.pt").exists()


def test_resume_of_a_run_killed_before_its_first_checkpoint_is_refused_and_changes_nothing(tmp_path):
    """kill -9 of run.py before any last.pt (--checkpoint-minutes off) leaves best.pt, metrics.jsonl and the
    vocabularies: --resume must not start afresh over them (it replaced best.pt with an untrained model, and
    appended a second 0..N series to metrics.jsonl); it is refused naming what is there, every file byte for byte
    as it was. The same for a finished run whose last.pt was removed."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, str(REPO / "run.py"), *SMALL, "--checkpoint-minutes", "off", "--steps",
                                "100000", "--eval-every", "10", "--log-every", "10", "--out", str(out)],
                               cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.time() + 180
        while not (any(r["kind"] == "eval" and r["updates"] >= 10 for r in _records_so_far(out / "metrics.jsonl"))
                   and (out / "best.pt").exists()):
            assert process.poll() is None and time.time() < deadline
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)  # the parent alone: its workers die with it
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert not (out / "last.pt").exists()
    before = fingerprint(out)
    resumed = run_py_session("--steps", "300", "--resume", "--out", str(out))
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert resumed.stderr.strip().splitlines()[-1] == (
        f"run.py: error: --resume {out}: holds a run (model.json, config.json, metrics.jsonl, best.pt) but no last.pt "
        f"to continue it from (killed before its first checkpoint, or last.pt was removed), and starting it afresh "
        f"would replace those files; choose another --out, or move them away to start over here")
    assert fingerprint(out) == before and resumed.leftover_processes == []


STREAMS = {  # how run.py's stdout and stderr are given: a file name, "closed" (`>&-`), or a pipe
    "stdout and stderr closed": ("closed", "closed"),  # the path of `>&-` alone (stdout closed) and more
    "stdout on a full device": ("/dev/full", subprocess.PIPE),
}


def test_a_run_with_closed_or_full_standard_streams_trains_and_writes_its_run_directory(tmp_path):
    """`run.py >&- 2>&-` (exit 1 without a word; `>&-` alone died with AttributeError), `>/dev/full` (an error that
    did not name stdout): a run needs no terminal. Each trains to --steps, writes its run directory (no message lands
    in a run file), exits 0; a full stdout is named once on stderr. `run.py tag >/dev/full` fails naming stdout."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    processes = {}
    for case, (stdout, stderr) in STREAMS.items():
        closed = [fd for fd, given in ((1, stdout), (2, stderr)) if given == "closed"]
        streams = {name: open(given, "w") if isinstance(given, str) and given != "closed" else
                   subprocess.DEVNULL if given == "closed" else given
                   for name, given in (("stdout", stdout), ("stderr", stderr))}
        processes[case] = subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), *SMALL, "--steps", "20", "--eval-every", "10",
             "--out", str(tmp_path / case)], cwd=REPO, env=ENV, text=True, **streams,
            preexec_fn=lambda closed=closed: [os.close(fd) for fd in closed])
    for case, process in processes.items():
        _, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, (case, stderr)
        summary = json.loads((tmp_path / case / "summary.json").read_text())
        assert (summary["updates"], summary["stop_reason"]) == (20, "max_steps"), case
        assert {"eval", "final_eval"} <= {r["kind"] for r in _records(tmp_path / case / "metrics.jsonl")}, case
        assert len((tmp_path / case / "command.txt").read_text().splitlines()) == 1, case
        if case == "stdout on a full device":
            assert [line for line in stderr.splitlines() if "stdout" in line] == [
                "run.py: warning: stdout: cannot write (no space left on device); nothing more is written there (a "
                "run's record stays in its directory: metrics.jsonl, summary.json)"]
            assert "Error" not in stderr and "error:" not in stderr, stderr
    with open("/dev/full", "w") as full:
        tagged = subprocess.run([sys.executable, str(REPO / "run.py"), "tag", "--checkpoint", str(tmp_path / case)],
                                cwd=REPO, env=ENV, input="ta lavial dulodium .\n", stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=240)
    assert tagged.returncode == 1
    assert tagged.stderr.splitlines()[-1] == "run.py tag: error: stdout: cannot write (no space left on device)"
