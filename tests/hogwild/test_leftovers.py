"""The janitor of hogwild/multihost/leftovers.py as its own process, fed through its pipe as a rank feeds it: what
is still registered when the pipe ends is removed (whole aborted jobs under mpiexec: tests/hogwild/test_distributed.py).
"""
import os
import subprocess
import sys

import _multiprocessing

from hogwild.multihost import leftovers

SEMAPHORE = 1  # multiprocessing.synchronize.SEMAPHORE


def test_a_killed_rank_leaves_no_semaphore_though_its_previous_tracker_still_lives(tmp_path):
    """kill -9 of a rank: its janitor sees the end of its pipe while the rank's resource tracker (started before the
    janitor, as run.py starts it) still lives, until the launcher kills the rank's process group a moment later,
    before that tracker has cleaned anything. The janitor removes the semaphore itself, and tells the tracker to
    forget it (else the tracker would warn of a leak and fail to unlink it again)."""
    name = f"/hogwild-test-{os.getpid()}"
    semaphore = _multiprocessing.SemLock(SEMAPHORE, 1, 1, name, False)
    folder = tmp_path / "hogwild-rank1-scratch"
    folder.mkdir()
    janitor_read, janitor_write = os.pipe()
    tracker_read, tracker_write = os.pipe()  # the previous tracker: alive for the whole test
    try:
        janitor = subprocess.Popen([sys.executable, "-I", leftovers.__file__, str(janitor_read), str(tracker_write)],
                                   pass_fds=(janitor_read, tracker_write))
        os.close(janitor_read)
        os.close(tracker_write)
        os.write(janitor_write, f"REGISTER:{name}:semaphore\nREGISTER:{folder}:{leftovers.FOLDER}\n".encode())
        os.close(janitor_write)  # the rank and its workers are gone
        assert janitor.wait(timeout=30) == 0
        assert not os.path.exists(f"/dev/shm/sem.{name[1:]}")
        assert not folder.exists()
        with os.fdopen(tracker_read, "rb") as tracker:
            assert tracker.read().decode().splitlines() == [f"REGISTER:{name}:semaphore",
                                                            f"UNREGISTER:{name}:semaphore"]
    finally:
        del semaphore
        try:
            _multiprocessing.sem_unlink(name)
        except OSError:
            pass
