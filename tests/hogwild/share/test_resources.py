"""hogwild.share.resources: more CPU workers than usable cores warns; a memory estimate above what is available refuses,
saying how many workers fit; /proc/meminfo is read as the kernel writes it; the /dev/shm estimate covers what sharing
takes, and a real small /dev/shm (a tmpfs in a mount namespace of its own) is refused before spawning."""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import warnings

import pytest

from hogwild.share.resources import (GPU_WORKER_BYTES, WORKER_BYTES, OversubscriptionWarning, ResourceError,
                                     available_memory, check_resources, check_shared_memory, estimate_memory,
                                     tensor_nbytes)

GIB = 2**30


def test_more_cpu_workers_than_cores_warns_naming_the_numbers():
    with pytest.warns(OversubscriptionWarning, match=r"^100 CPU workers on 2 usable cores: workers will take turns, "
                                                     r".* at most 2 keep every core busy"):
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=2, available=100 * GIB)
    with pytest.warns(OversubscriptionWarning, match=r"^2 CPU workers x 2 threads on 3 usable cores.* at most 1 "):
        check_resources(["cpu"] * 2, 2, 0, 0, 0, cores=3, available=100 * GIB)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_resources(["cpu"] * 2, 1, 0, 0, 0, cores=2, available=100 * GIB)  # one worker per core: quiet
        check_resources(["cuda:0", "cuda:1", "cuda:2"], 1, 0, 0, 0, cores=2, available=100 * GIB)


def test_a_memory_estimate_above_what_is_available_is_refused():
    assert estimate_memory(["cpu"] * 3, 10, 20, 5) == 3 * (WORKER_BYTES + 10) + 10 + 20 + 2 * 5
    assert estimate_memory(["cuda:0"], 0, 0, 0) == WORKER_BYTES + GPU_WORKER_BYTES
    with pytest.raises(ResourceError, match=r"^100 workers need about 14\.6 GiB of memory \(150 MiB per process "
                                            r"plus 0\.0 MiB of gradients each, .*\), but 2\.0 GiB is available; "
                                            r"about 13 workers fit$") as refused:
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=100, available=2 * GIB)
    assert refused.value.option == "workers"
    check_resources(["cpu"] * 13, 1, 0, 0, 0, cores=100, available=2 * GIB)  # 13 fit


def test_meminfo_and_tensor_sizes(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   22000000 kB\n")
    assert available_memory(str(meminfo)) == 22000000 * 1024
    assert available_memory(str(tmp_path / "none")) is None
    import torch
    assert tensor_nbytes([{"a": torch.zeros(3, 2)}, (torch.zeros(4, dtype=torch.int64), "x")]) == 24 + 32


def test_the_shm_estimate_counts_whole_pages_per_tensor():
    from hogwild.share.resources import SHM_FIXED_BYTES, SHM_PAGE, shared_memory_need
    assert shared_memory_need([]) == SHM_FIXED_BYTES
    assert shared_memory_need([1, SHM_PAGE, SHM_PAGE + 1, 0]) == SHM_FIXED_BYTES + 4 * SHM_PAGE


def test_the_shm_estimate_covers_what_sharing_really_takes():
    """The estimate against the real bytes: every storage the parent shares (model, optimizer state), measured as
    the pages they take, must fit in it; the old estimate (bytes, no pages) was 1 MiB short for such models."""
    import torch

    from hogwild.share.resources import SHM_PAGE, shared_memory_need
    from hogwild.shared_optim import SharedOptimizer
    from hogwild.share.shared_run import _storage_nbytes
    from tests.hogwild import engine_helpers as H
    model = H.many_tensors_model()
    params = list(model.parameters())
    need = shared_memory_need(_storage_nbytes(model) + SharedOptimizer.state_tensor_nbytes(params, "adam"))
    model.share_memory()
    optimizer = SharedOptimizer(params, "adam")
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in list(model.state_dict().values()) + [t for s in optimizer.state for t in s.values()]}
    assert all(t.is_shared() for s in optimizer.state for t in s.values())
    taken = sum(-(-size // SHM_PAGE) * SHM_PAGE for size in storages.values())
    assert len(storages) == 4 * len(params) and taken + 64 * 1024 <= need
    old = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + \
        SharedOptimizer.state_nbytes(params, "adam")
    assert taken - old > 2**20 / 2  # pages, not bytes: what the old estimate missed
    assert torch.equal(optimizer.state[0]["exp_avg"], torch.zeros(4, 4))


def test_shared_memory_check_names_sizes_and_the_fix(tmp_path):
    check_shared_memory(1, str(tmp_path))
    with pytest.raises(RuntimeError, match=r"has [\d.]+ MiB free, but the shared parameters and optimizer state need "
                                           r"[\d.]+ MiB.*--shm-size"):
        check_shared_memory(2**60, str(tmp_path))


SHM_SCRIPT = pathlib.Path(__file__).parents[1] / "engine_scripts" / "train_in_small_shm.py"


def run_with_shm(size: int, run_dir, check: bool) -> subprocess.CompletedProcess:
    """The script under a /dev/shm of `size` bytes: a private tmpfs in a new mount namespace (needs root)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to give a process a small /dev/shm of its own")
    command = (f"mount -t tmpfs -o size={size} tmpfs /dev/shm && exec {shlex.quote(sys.executable)} "
               f"{shlex.quote(str(SHM_SCRIPT))} {shlex.quote(str(run_dir))} {int(check)}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    if "mount" in done.stderr and done.returncode != 0 and "error:" not in done.stderr:
        pytest.skip(f"cannot mount a tmpfs on /dev/shm here: {done.stderr.strip()}")
    return done


def shm_need() -> int:
    from hogwild.share.resources import shared_memory_need
    from hogwild.shared_optim import SharedOptimizer
    from hogwild.share.shared_run import _storage_nbytes
    from tests.hogwild import engine_helpers as H
    model = H.many_tensors_model()
    return shared_memory_need(_storage_nbytes(model) + SharedOptimizer.state_tensor_nbytes(list(model.parameters()),
                                                                                           "adam"))


def test_a_small_dev_shm_is_refused_before_spawning_naming_the_size_and_the_fixes(tmp_path):
    from hogwild.share.resources import SHM_PAGE
    need = shm_need()
    done = run_with_shm(need - SHM_PAGE, tmp_path / "short", check=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"error: /dev/shm has {(need - SHM_PAGE) / 2**20:.1f} MiB free, but the shared parameters and "
                     rf"optimizer state need {need / 2**20:.1f} MiB\. Enlarge it \(docker run --shm-size=64m, as "
                     r"Docker gives containers 64 MiB; on a host: mount -o remount,size=64m /dev/shm\) or free space "
                     r"there; to try anyway, run\.py --no-check-shm \(the library: Config\(check_shm=False\)\)",
                     done.stderr), done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"left": []}
    assert not (tmp_path / "short" / "last.pt").exists()  # refused before anything was trained


@pytest.mark.slow
def test_a_dev_shm_of_exactly_the_estimate_trains(tmp_path):
    """The margin: at exactly the estimate the run trains (the old estimate let torch fail 1 MiB above it)."""
    done = run_with_shm(shm_need(), tmp_path / "exact", check=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()[-2:]] == [{"updates": 4}, {"left": []}]


def test_a_failure_inside_torch_leaves_no_dev_shm_file(tmp_path):
    """With the check off, a /dev/shm too small fails in torch, which once left its torch_* file behind."""
    done = run_with_shm(64 * 1024, tmp_path / "unchecked", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"error: unable to allocate shared memory\(shm\) for file .*: /dev/shm cannot hold the shared "
                     r"parameters and optimizer state; enlarge it \(docker run --shm-size=\.\.\.\) or free space "
                     r"there", done.stderr), done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"left": []}
