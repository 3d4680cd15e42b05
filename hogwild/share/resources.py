"""What a run asks of the machine before anything is spawned: CPU workers against usable cores (a warning: Hogwild!
gains nothing from more busy workers than cores, and each spawned worker takes seconds to start), and memory against
what is available (a refusal: 100 workers on a small machine take ~30 GB before their first update).

The memory estimate: every spawned worker costs WORKER_BYTES (a Python process with torch imported and training:
its private memory, measured on real workers of the default POS and NMT jobs, docs/benchmarks.md; the shared
libraries' pages are counted once, in the parent) plus its gradients (the model's size) - a GPU worker another
GPU_WORKER_BYTES of host memory for its CUDA context (an assumption, not measured on this project's machines) - and
the parent holds the shared model, the optimizer state and the batches (twice: the list and the file the workers
map). What is available (`memory_room`) is the smaller of the kernel's MemAvailable and what the process's memory
cgroup (a container's limit: cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`, at its own level or any above)
still allows: the OOM killer acts on the cgroup's limit, whatever the host has free.

The /dev/shm estimate (`shared_memory_need`): every shared tensor (parameters, buffers, optimizer state) rounded up
to whole pages, plus SHM_FIXED_BYTES for the run's small shared objects. `check_shared_memory` refuses a run
whose need /dev/shm cannot hold, naming the fixes; `removing_leaked_shm` removes what torch leaves there when a
move to shared memory fails anyway.

Serves step 2 of `hogwild.train` (share): checked before anything is moved to shared memory.

Usage: `check_resources(devices, threads, model_bytes, optimizer_bytes, batch_bytes)` (warns, or raises
ResourceError naming the `workers` setting)
"""
from __future__ import annotations

import mmap
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

WORKER_BYTES = 300 * 2**20
GPU_WORKER_BYTES = 500 * 2**20
SHM_PAGE = mmap.PAGESIZE  # tmpfs charges every shared tensor's file in whole pages
SHM_FIXED_BYTES = 2**20  # /dev/shm files beside the tensors: counters, run control, step budget, queue semaphores
#                          (tens of KiB), with room to spare
NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX in bytes: 9223372036854771712)


class ResourceError(RuntimeError):
    """The run cannot fit the machine. `option` names the setting to change (a command line shows its flag)."""

    def __init__(self, message: str, option: str = "workers"):
        super().__init__(message)
        self.option = option


class OversubscriptionWarning(UserWarning):
    """More busy CPU threads than usable cores: the run works, but slower per update and slow to start."""

    option = "workers"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class MemoryRoom:
    """Bytes a run may still take on this host, and what says so (for the refusal's message)."""

    available: int
    source: str  # "MemAvailable", or the cgroup limit: "the memory cgroup limit of 8.0 GiB (/sys/fs/.../memory.max)"


def memory_room(root: str | os.PathLike = "/") -> MemoryRoom | None:
    """The smaller of MemAvailable and the room under this process's memory cgroup limit (None when neither can be
    read, e.g. not Linux). `root` is where /proc and /sys are found (tests give a fake tree)."""
    rooms = [room for room in (_meminfo_room(root), cgroup_memory_room(root)) if room is not None]
    return min(rooms, key=lambda room: room.available) if rooms else None


def _meminfo_room(root: str | os.PathLike) -> MemoryRoom | None:
    try:
        with open(Path(root, "proc/meminfo")) as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return MemoryRoom(int(line.split()[1]) * 1024, "MemAvailable")
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_memory_room(root: str | os.PathLike = "/") -> MemoryRoom | None:
    """What this process's memory cgroup still allows: at its own level and every level above it that has a limit,
    the limit less the memory charged there (less the inactive file cache, which the kernel reclaims before it OOM
    kills: Docker's `docker stats` counts usage so), the smallest. None when no level has a limit ("max", or cgroup
    v1's huge number) or there is no memory cgroup to read."""
    rooms = []
    for folder, limit_file, usage_file, inactive_key in _cgroup_levels(Path(root)):
        limit = _read_int(folder / limit_file)
        if limit is None or limit >= NO_LIMIT:
            continue
        usage = _read_int(folder / usage_file) or 0
        inactive = _stat_value(folder / "memory.stat", inactive_key)
        rooms.append(MemoryRoom(max(0, limit - max(0, usage - inactive)),
                                f"the memory cgroup limit of {limit / 2**30:.1f} GiB ({folder / limit_file})"))
    return min(rooms, key=lambda room: room.available) if rooms else None


def _cgroup_levels(root: Path) -> Iterator[tuple[Path, str, str, str]]:
    """(folder, limit file, usage file, memory.stat key of the inactive file cache) from this process's memory
    cgroup up to the hierarchy's root: cgroup v2 (one hierarchy, `0::/path` in /proc/self/cgroup) or v1 (the
    `memory` controller's line). A path that is not under the mount (a container that mounts its own cgroup as
    the root, without a cgroup namespace) reads the mount's root."""
    try:
        lines = Path(root, "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    paths = {}
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) == 3:
            for controller in fields[1].split(",") if fields[1] else [""]:
                paths[controller] = fields[2]
    unified, v1 = root / "sys/fs/cgroup", root / "sys/fs/cgroup/memory"
    if "" in paths and (unified / "cgroup.controllers").exists():
        mount, path, files = unified, paths[""], ("memory.max", "memory.current", "inactive_file")
    elif "memory" in paths and v1.is_dir():
        mount, path, files = v1, paths["memory"], ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                   "total_inactive_file")
    else:
        return
    folder = mount / path.lstrip("/")
    if not folder.is_dir():
        folder = mount
    while True:
        yield (folder, *files)
        if folder == mount or mount not in folder.parents:
            return
        folder = folder.parent


def _read_int(path: Path) -> int | None:
    """An integer file of the cgroup's; None for "max" (no limit) or a file that is not there (the root level)."""
    try:
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _stat_value(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def estimate_memory(devices: Sequence[str], model_bytes: int, optimizer_bytes: int, batch_bytes: int) -> int:
    """Bytes of memory a run needs on this host (see the module docstring for what is counted)."""
    gpu = sum(1 for device in devices if device != "cpu")
    workers = len(devices) * (WORKER_BYTES + model_bytes) + gpu * GPU_WORKER_BYTES
    return workers + model_bytes + optimizer_bytes + 2 * batch_bytes


def check_resources(devices: Sequence[str], threads: int, model_bytes: int, optimizer_bytes: int,
                    batch_bytes: int, cores: int | None = None, available: MemoryRoom | None = None) -> None:
    """Warn (OversubscriptionWarning) when CPU workers x threads exceed the usable cores; raise ResourceError when
    the memory estimate exceeds the available memory. `cores` and `available` default to this machine's
    (`usable_cores`, `memory_room`)."""
    cores = usable_cores() if cores is None else cores
    cpu = sum(1 for device in devices if device == "cpu")
    if cpu * threads > cores:
        threads_text = f" x {threads} threads" if threads > 1 else ""
        warnings.warn(OversubscriptionWarning(
            f"{cpu} CPU workers{threads_text} on {cores} usable core{'s' if cores != 1 else ''}: workers will "
            f"take turns, so updates are slower and start-up takes longer (each worker imports torch); at most "
            f"{max(1, cores // threads)} keep every core busy without oversubscribing"))  # same line: shown once
    room = memory_room() if available is None else available
    need = estimate_memory(devices, model_bytes, optimizer_bytes, batch_bytes)
    if room is not None and need > room.available:
        per_worker = WORKER_BYTES + model_bytes + (GPU_WORKER_BYTES if cpu < len(devices) else 0)
        fit = max(0, (room.available - (need - len(devices) * per_worker)) // per_worker)
        raise ResourceError(
            f"{len(devices)} workers need about {need / 2**30:.1f} GiB of memory ({WORKER_BYTES / 2**20:.0f} MiB per "
            f"process plus {model_bytes / 2**20:.1f} MiB of gradients each, the shared model, optimizer state and "
            f"batches), but {room.available / 2**30:.1f} GiB is available ({room.source}); about {fit} workers fit")


def shared_memory_need(tensor_bytes: Iterable[int]) -> int:
    """Bytes of /dev/shm a run takes: each shared tensor is a file of its own there, charged in whole pages (a
    model of many small tensors takes far more than its byte count), plus SHM_FIXED_BYTES."""
    return sum(-(-size // SHM_PAGE) * SHM_PAGE for size in tensor_bytes) + SHM_FIXED_BYTES


def tensor_nbytes(value) -> int:
    """Bytes of every tensor in a (nested) batch, sequence of batches, or model state_dict."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_nbytes(v) for v in value)
    return 0


def check_shared_memory(required_bytes: int, path: str = "/dev/shm") -> None:
    """Fail with a clear message when `path` cannot hold `required_bytes` of shared tensors
    (resources.shared_memory_need): the size needed and the fixes, for docker, a host and run.py."""
    if not os.path.isdir(path):
        return  # not Linux-style shared memory (e.g. macOS): nothing to check
    usage = shutil.disk_usage(path)
    if usage.free < required_bytes:
        size = usage.total + required_bytes - usage.free  # what the mount would need, at least
        suggest = f"{-(-size // 2**30)}g" if size > 2**30 else f"{-(-size // (64 * 2**20)) * 64}m"
        raise RuntimeError(
            f"{path} has {usage.free / 2**20:.1f} MiB free, but the shared parameters and optimizer state need "
            f"{required_bytes / 2**20:.1f} MiB. Enlarge it (docker run --shm-size={suggest}, as Docker gives "
            f"containers 64 MiB; on a host: mount -o remount,size={suggest} {path}) or free space there; to try "
            f"anyway, run.py --no-check-shm (the library: Config(check_shm=False))")


@contextmanager
def removing_leaked_shm(path: str = "/dev/shm") -> Iterator[None]:
    """When moving tensors to shared memory fails (a full /dev/shm), torch leaves the file it could not fill behind
    (`torch_<pid>_...`): remove this process's (its successful ones are already unlinked under the file_descriptor
    sharing strategy), and say what to enlarge."""
    import torch.multiprocessing

    try:
        yield
    except RuntimeError as error:
        if "shared memory" not in str(error) or torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
            raise
        prefix = f"torch_{os.getpid()}_"
        for name in os.listdir(path) if os.path.isdir(path) else []:
            if name.startswith(prefix):
                with suppress(OSError):
                    os.unlink(os.path.join(path, name))
        raise RuntimeError(f"{error}: {path} cannot hold the shared parameters and optimizer state; enlarge it "
                           f"(docker run --shm-size=...) or free space there") from error
