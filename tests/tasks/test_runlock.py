"""tasks.runlock: one run per run directory. A live holder (a real process) is named; the lock of a process killed
with SIGKILL is taken over; the holder removes the lock file when it ends."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from hogwild.tasks.runlock import LOCK_FILE, RunDirBusy, RunDirLock
from tests.tasks.helpers import REPO

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
