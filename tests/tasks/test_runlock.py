"""tasks.runlock: one run per run directory. A live holder (a real process) is named; the lock of a process killed
with SIGKILL is taken over; the holder removes the lock file when it ends."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from hogwild.tasks.runlock import LOCK_FILE, NotALockFile, RunDirBusy, RunDirLock, describe_holder, live_holder
from tests.tasks.helpers import REPO, run_py

HOLD = textwrap.dedent("""
    import sys, time
    from hogwild.tasks.runlock import RunDirLock
    lock = RunDirLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def _holder(run_dir):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_live_holder_is_named_and_a_killed_ones_lock_is_taken_over(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(RunDirBusy, match=rf"--out {tmp_path}: run directory is in use by pid {holder.pid} "
                                             rf"\(started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\)"):
            RunDirLock(tmp_path).acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # left behind by the killed run
    lock = RunDirLock(tmp_path).acquire()
    assert lock.took_over["pid"] == holder.pid
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_the_lock_is_exclusive_within_a_process_and_free_after_release(tmp_path):
    with RunDirLock(tmp_path) as lock:
        assert lock.took_over is None
        with pytest.raises(RunDirBusy, match=f"in use by pid {os.getpid()}"):
            RunDirLock(tmp_path).acquire()
    assert os.listdir(tmp_path) == []
    with RunDirLock(tmp_path):
        pass


def test_a_symlinked_lock_is_refused_and_its_target_left_intact(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("a file the lock must not truncate\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).symlink_to(target)
    with pytest.raises(NotALockFile, match=rf"--out {run_dir}: {run_dir / LOCK_FILE} is a symbolic link to {target}, "
                                           rf"not a lock file written by run.py"):
        RunDirLock(run_dir).acquire()
    assert target.read_text() == "a file the lock must not truncate\n" and (run_dir / LOCK_FILE).is_symlink()
    assert live_holder(run_dir) is None  # a reader does not follow it either
    (run_dir / LOCK_FILE).unlink()
    (run_dir / LOCK_FILE).mkdir()
    with pytest.raises(NotALockFile, match=r"is not a regular file"):
        RunDirLock(run_dir).acquire()


def test_run_py_refuses_a_symlinked_lock_and_truncates_nothing(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).symlink_to(target)
    done = run_py("--task", "pos", "--synthetic-size", "50", "--steps", "5", "--no-progress", "--out", str(run_dir))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"run.py: error: --out {run_dir}: {run_dir / LOCK_FILE} is a symbolic link to {target}, not a lock file "
        f"written by run.py; it is left as it is (remove it if no run uses this directory)")
    assert target.read_text() == "keep me\n" and os.listdir(run_dir) == [LOCK_FILE]


def test_live_holder_names_a_running_holder_only(tmp_path):
    assert live_holder(tmp_path) is None  # no lock file
    holder = _holder(tmp_path)
    try:
        assert live_holder(tmp_path)["pid"] == holder.pid
        assert describe_holder(live_holder(tmp_path)).startswith(f"pid {holder.pid} (started ")
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / LOCK_FILE).exists() and live_holder(tmp_path) is None  # left by a killed run: not live


def test_a_run_still_starting_is_named_as_the_holder_not_as_a_run_without_last_pt(tmp_path):
    """A run that has written best.pt and metrics.jsonl but no last.pt yet: a second run on it, or a --resume, said
    "holds a run ... but no last.pt (killed before its first checkpoint ...)", or "add --resume to continue it"."""
    from hogwild.tasks.rundir import check_out
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("metrics.jsonl", "best.pt"):
        (run_dir / name).write_text("{}\n")
    (run_dir / "config.json").write_text(json.dumps({"run": {"task": "pos", "synthetic_size": 50}}))
    holder = _holder(run_dir)
    try:
        done = run_py("--task", "pos", "--synthetic-size", "50", "--steps", "5", "--no-progress", "--resume",
                      "--out", str(run_dir))
        assert done.returncode == 1
        busy = (rf"run\.py: error: --out {run_dir}: run directory is in use by pid {holder.pid} \(started "
                rf"[0-9: -]+\); wait for it to finish, stop it, or choose another --out")
        assert re.fullmatch(busy, done.stderr.strip().splitlines()[-1]), done.stderr
        with pytest.raises(RunDirBusy, match=busy.removeprefix(r"run\.py: error: ")):
            check_out(run_dir, resume=False)
    finally:
        holder.kill()
        holder.wait()
