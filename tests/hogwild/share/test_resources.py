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
import time
import warnings

import pytest

from hogwild.share.resources import (GPU_WORKER_BYTES, WORKER_BYTES, MemoryRoom, OversubscriptionWarning,
                                     ResourceError, cgroup_memory_room, check_resources, check_shared_memory,
                                     estimate_memory, memory_room, tensor_nbytes)
from tests.tasks.helpers import REPO

GIB = 2**30
PLENTY = MemoryRoom(100 * GIB, "MemAvailable")


def test_more_cpu_workers_than_cores_warns_naming_the_numbers():
    with pytest.warns(OversubscriptionWarning, match=r"^100 CPU workers on 2 usable cores: workers will take turns, "
                                                     r".* at most 2 keep every core busy"):
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=2, available=PLENTY)
    with pytest.warns(OversubscriptionWarning, match=r"^2 CPU workers x 2 threads on 3 usable cores.* at most 1 "):
        check_resources(["cpu"] * 2, 2, 0, 0, 0, cores=3, available=PLENTY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_resources(["cpu"] * 2, 1, 0, 0, 0, cores=2, available=PLENTY)  # one worker per core: quiet
        check_resources(["cuda:0", "cuda:1", "cuda:2"], 1, 0, 0, 0, cores=2, available=PLENTY)


def test_a_memory_estimate_above_what_is_available_is_refused():
    assert estimate_memory(["cpu"] * 3, 10, 20, 5) == 3 * (WORKER_BYTES + 10) + 10 + 20 + 2 * 5
    assert estimate_memory(["cuda:0"], 0, 0, 0) == WORKER_BYTES + GPU_WORKER_BYTES
    room = MemoryRoom(2 * GIB, "the memory cgroup limit of 8.0 GiB (/sys/fs/cgroup/memory.max)")
    with pytest.raises(ResourceError, match=r"^100 workers need about 29\.3 GiB of memory \(300 MiB per process "
                                            r"plus 0\.0 MiB of gradients each, .*\), but 2\.0 GiB is available \(the "
                                            r"memory cgroup limit of 8\.0 GiB \(/sys/fs/cgroup/memory\.max\)\); about 6 "
                                            r"workers fit$") as refused:
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=100, available=room)
    assert refused.value.option == "workers"
    check_resources(["cpu"] * 6, 1, 0, 0, 0, cores=100, available=room)  # 6 fit


def fake_root(tmp_path, cgroup: str, files: dict[str, str], meminfo_kib: int = 22000000) -> pathlib.Path:
    """A /proc and /sys tree as the kernel writes them: /proc/meminfo, /proc/self/cgroup and cgroup files."""
    for name, text in {"proc/meminfo": f"MemTotal: 24000000 kB\nMemAvailable:   {meminfo_kib} kB\n",
                       "proc/self/cgroup": cgroup, **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_cgroup_v2_limits_are_read_at_every_level_and_the_smallest_room_wins(tmp_path):
    v2 = "sys/fs/cgroup"
    root = fake_root(tmp_path, "0::/docker/abc\n", {
        f"{v2}/cgroup.controllers": "cpu memory\n",
        f"{v2}/docker/memory.max": "max\n", f"{v2}/docker/memory.current": "9000000000\n",
        f"{v2}/docker/abc/memory.max": "8589934592\n", f"{v2}/docker/abc/memory.current": "3221225472\n",
        f"{v2}/docker/abc/memory.stat": "anon 2000\nfile 1073741824\ninactive_file 1073741824\nactive_file 0\n"})
    limit = f"the memory cgroup limit of 8.0 GiB ({root / v2 / 'docker/abc/memory.max'})"
    assert cgroup_memory_room(root) == MemoryRoom(8 * GIB - 2 * GIB, limit)  # the inactive file cache is reclaimed
    assert memory_room(root) == MemoryRoom(6 * GIB, limit)  # below MemAvailable's 21 GiB
    (root / v2 / "docker/memory.max").write_text("4294967296\n")  # a tighter limit on the level above
    assert cgroup_memory_room(root).source == f"the memory cgroup limit of 4.0 GiB ({root / v2 / 'docker/memory.max'})"
    assert cgroup_memory_room(root).available == 0  # 9 GB charged against 4 GiB: no room at all
    (root / v2 / "docker/memory.max").write_text("max\n")
    (root / v2 / "docker/abc/memory.max").write_text("max\n")
    assert cgroup_memory_room(root) is None
    assert memory_room(root) == MemoryRoom(22000000 * 1024, "MemAvailable")


def test_cgroup_v1_limits_and_no_limit(tmp_path):
    v1 = "sys/fs/cgroup/memory"
    root = fake_root(tmp_path, "12:pids:/x\n4:memory:/process_api/7\n1:name=systemd:/\n0::/\n", {
        f"{v1}/memory.limit_in_bytes": "9223372036854771712\n", f"{v1}/memory.usage_in_bytes": "6000000000\n",
        f"{v1}/process_api/7/memory.limit_in_bytes": "2147483648\n",
        f"{v1}/process_api/7/memory.usage_in_bytes": "1073741824\n",
        f"{v1}/process_api/7/memory.stat": "cache 0\ninactive_file 5\ntotal_inactive_file 536870912\n"},
        meminfo_kib=1000)
    limit = f"the memory cgroup limit of 2.0 GiB ({root / v1 / 'process_api/7/memory.limit_in_bytes'})"
    assert cgroup_memory_room(root) == MemoryRoom(GIB + GIB // 2, limit)
    assert memory_room(root) == MemoryRoom(1000 * 1024, "MemAvailable")  # the host has less: the smaller wins
    (root / v1 / "process_api/7/memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert cgroup_memory_room(root) is None
    # a container that mounts its own cgroup as the root (no cgroup namespace): the path is not under the mount
    root = fake_root(tmp_path / "container", "4:memory:/docker/abc\n", {
        f"{v1}/memory.limit_in_bytes": "1073741824\n", f"{v1}/memory.usage_in_bytes": "0\n"})
    assert cgroup_memory_room(root).available == GIB
    assert cgroup_memory_room(tmp_path / "nothing") is None and memory_room(tmp_path / "nothing") is None


def test_this_machines_memory_room_is_read():
    room = memory_room()
    assert room is not None and 0 < room.available < 2**50
    assert room.source == "MemAvailable" or room.source.startswith("the memory cgroup limit of ")


def test_tensor_sizes():
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


@pytest.fixture
def memory_cgroup():
    """A child of this process's memory cgroup with a 1 GiB limit (cgroup v1 or v2), removed afterwards; skipped
    where it cannot be made (it needs root and a writable cgroup hierarchy)."""
    from hogwild.share.resources import _cgroup_levels
    levels = list(_cgroup_levels(pathlib.Path("/")))
    if not levels:
        pytest.skip("no memory cgroup hierarchy to make a limited cgroup in")
    folder, limit_file = levels[0][0] / f"hogwild-test-{os.getpid()}", levels[0][1]
    try:
        folder.mkdir()
        (folder / limit_file).write_text(str(GIB))
    except OSError as error:
        if folder.exists():
            folder.rmdir()
        pytest.skip(f"cannot make a memory cgroup with a limit here ({error}): needs root")
    yield folder, limit_file
    for _ in range(50):  # the processes it held have exited; the kernel releases the cgroup soon after
        try:
            folder.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def test_run_py_in_a_memory_cgroup_is_refused_naming_workers_and_the_limit(memory_cgroup, tmp_path):
    """A real container-style limit (1 GiB) on a host with more MemAvailable: the check counts the cgroup's room,
    refuses before anything is written or spawned, and names --workers and the limit file."""
    folder, limit_file = memory_cgroup
    command = (f"echo $$ > {shlex.quote(str(folder / 'cgroup.procs'))} && exec {shlex.quote(sys.executable)} run.py "
               f"--synthetic-size 200 --steps 5 --no-progress --workers 8 --out {shlex.quote(str(tmp_path / 'run'))}")
    done = subprocess.run(["sh", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.fullmatch(rf"run\.py: error: --workers: 8 workers need about 2\.\d GiB of memory \(300 MiB per process "
                        rf".*\), but 0\.\d GiB is available \(the memory cgroup limit of 1\.0 GiB "
                        rf"\({re.escape(str(folder / limit_file))}\)\); about [0-2] workers fit",
                        done.stderr.strip().splitlines()[-1]), done.stderr
    assert not (tmp_path / "run").exists() and "Traceback" not in done.stderr
