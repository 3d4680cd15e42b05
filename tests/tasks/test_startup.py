"""Too many workers for the machine (issue #14 item 3), in real processes pinned to one core: run.py warns naming
--workers, shows start-up progress, and Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or a
closed terminal (SIGHUP to the whole group) ends a start-up cleanly, with nothing left running (--time-limit:
tests/hogwild/parent/test_startup_bounds.py); so does Ctrl-C while run.py still imports torch."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.tasks.helpers import REPO
from tests.tasks.misuse_helpers import session_members

pytestmark = pytest.mark.slow

# On one core, spawned: each imports torch (>1 s of CPU), so start-up takes well over the 2 s before progress (forked
# from the fork server, CPU workers start in a fraction of a second)
WORKERS = "8"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
       "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache"), "HOGWILD_START_METHOD": "spawn"}


def _start(*args):
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "--task", "pos", "--synthetic-size", "200",
                             "--no-progress", "--workers", WORKERS, *args], cwd=REPO, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))


def _finish(process, timeout=180):
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return stdout, stderr


def _no_leftovers(process):
    import time
    deadline = time.monotonic() + 15
    while session_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_members(process.pid) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_or_a_closed_terminal_during_start_up_stops_the_run_cleanly(tmp_path, signum):
    process = _start("--steps", "1000", "--out", str(tmp_path / "run"))
    seen = []
    for line in process.stderr:  # progress appears 2 s into start-up
        seen.append(line)
        if line.startswith("starting workers: "):
            break
    assert process.poll() is None, "".join(seen)
    os.killpg(process.pid, signum)
    stdout, stderr = _finish(process, timeout=120)
    stderr = "".join(seen) + stderr
    assert process.returncode == 130, stdout + stderr
    assert f"run.py: warning: --workers: {WORKERS} CPU workers on 1 usable core: workers will take turns" in stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert f"interrupted: continue with the same command plus --resume --out {tmp_path / 'run'}" in stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["stop_reason"], summary["updates"]) == (f"signal {signal.Signals(signum).name}", 0)
    _no_leftovers(process)


def test_ctrl_c_while_torch_imports_stops_the_run_cleanly(tmp_path):
    """Ctrl-C in run.py's first seconds, while torch imports: torch's import could swallow the KeyboardInterrupt half
    way (numpy left half-imported: the run then failed with "module 'numpy' has no attribute 'logical_and'" and left
    a run directory without last.pt), or it ended with a traceback. run.py holds it until the imports are done:
    "interrupted", exit 130, nothing written. The moment: the first module of the hogwild package imported (-X
    importtime names each as it is done), before torch's."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-X", "importtime", str(REPO / "run.py"), "--synthetic-size", "200",
                                "--steps", "5", "--out", str(out)], cwd=REPO, env=ENV, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.split("|")[-1].strip() == "hogwild._checkout":
            break
    assert process.poll() is None, "".join(seen)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = _finish(process, timeout=120)
    messages = [line for line in stderr.splitlines() if not line.startswith("import time:")]
    assert (process.returncode, messages, stdout) == (130, ["run.py: interrupted"], "")
    assert not out.exists()


def test_a_ctrl_c_during_the_teardown_after_run_py_ended_prints_no_traceback(tmp_path):
    """An impatient second Ctrl-C as a run stops can land after main() returned, in the interpreter's teardown
    (torch's atexit finalizers): it printed 'Exception ignored in atexit callback' and a KeyboardInterrupt traceback.
    Here a Ctrl-C is sent from the last atexit callback of a run.py that refused its command (exit 1)."""
    script = ("import atexit, os, runpy, signal, sys, time\n"
              "def late_ctrl_c():\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    time.sleep(0.3)\n"
              "    print('teardown went on', flush=True)\n"
              "atexit.register(late_ctrl_c)\n"
              f"sys.argv = ['run.py', 'tag', '--checkpoint', {str(tmp_path / 'no-run')!r}, 'in.txt']\n"
              "runpy.run_path('run.py', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "error:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert done.stdout == "teardown went on\n"
