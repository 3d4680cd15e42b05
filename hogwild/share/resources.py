"""What a run asks of the machine before anything is spawned: CPU workers against usable cores (a warning: Hogwild!
gains nothing from more busy workers than cores, and each spawned worker takes seconds to start), and memory against
what is available (a refusal: 100 workers on a small machine take ~15 GB before their first update).

The memory estimate: every spawned worker costs WORKER_BYTES (a Python process with torch imported: 127-185 MB
anonymous memory measured on torch 2.x CPU workers of the POS task) plus its gradients (the model's size) - a GPU
worker another GPU_WORKER_BYTES of host memory for its CUDA context (an assumption, not measured on this project's
machines) - and the parent holds the shared model, the
optimizer state and the batches (twice: the list and the file the workers map).

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

WORKER_BYTES = 150 * 2**20
GPU_WORKER_BYTES = 500 * 2**20
SHM_PAGE = mmap.PAGESIZE  # tmpfs charges every shared tensor's file in whole pages
SHM_FIXED_BYTES = 2**20  # /dev/shm files beside the tensors: counters, run control, step budget, queue semaphores
#                          (tens of KiB), with room to spare


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


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes (None where /proc/meminfo does not exist)."""
    try:
        with open(meminfo) as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def estimate_memory(devices: Sequence[str], model_bytes: int, optimizer_bytes: int, batch_bytes: int) -> int:
    """Bytes of memory a run needs on this host (see the module docstring for what is counted)."""
    gpu = sum(1 for device in devices if device != "cpu")
    workers = len(devices) * (WORKER_BYTES + model_bytes) + gpu * GPU_WORKER_BYTES
    return workers + model_bytes + optimizer_bytes + 2 * batch_bytes


def check_resources(devices: Sequence[str], threads: int, model_bytes: int, optimizer_bytes: int,
                    batch_bytes: int, cores: int | None = None, available: int | None = None) -> None:
    """Warn (OversubscriptionWarning) when CPU workers x threads exceed the usable cores; raise ResourceError when
    the memory estimate exceeds the available memory. `cores` and `available` default to this machine's."""
    cores = usable_cores() if cores is None else cores
    cpu = sum(1 for device in devices if device == "cpu")
    if cpu * threads > cores:
        threads_text = f" x {threads} threads" if threads > 1 else ""
        warnings.warn(OversubscriptionWarning(
            f"{cpu} CPU workers{threads_text} on {cores} usable core{'s' if cores != 1 else ''}: workers will "
            f"take turns, so updates are slower and start-up takes longer (each worker imports torch); at most "
            f"{max(1, cores // threads)} keep every core busy without oversubscribing"))  # same line: shown once
    available = available_memory() if available is None else available
    need = estimate_memory(devices, model_bytes, optimizer_bytes, batch_bytes)
    if available is not None and need > available:
        per_worker = WORKER_BYTES + model_bytes + (GPU_WORKER_BYTES if cpu < len(devices) else 0)
        fit = max(0, (available - (need - len(devices) * per_worker)) // per_worker)
        raise ResourceError(
            f"{len(devices)} workers need about {need / 2**30:.1f} GiB of memory ({WORKER_BYTES / 2**20:.0f} MiB per "
            f"process plus {model_bytes / 2**20:.1f} MiB of gradients each, the shared model, optimizer state and "
            f"batches), but {available / 2**30:.1f} GiB is available; about {fit} workers fit")


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
