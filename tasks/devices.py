"""Which device each worker trains on: `--gpus N` (one worker per GPU) or `--workers N` (CPU processes).

The parent only counts the GPUs (torch.cuda.device_count() creates no CUDA context), so spawned workers can still
initialise CUDA themselves; a torch built without CUDA counts 0.

Usage: `devices = worker_devices(gpus=0, workers=2)` -> `['cpu', 'cpu']`;
`worker_devices(0, 2, cpu_workers="replica")` -> `['cpu-replica', 'cpu-replica']`

CPU workers train either in place on the shared parameters ('cpu': the classic Hogwild worker, no copy) or on a
private replica that pulls the shared parameters before every step ('cpu-replica'), so that a step's forward and
backward see one version of them while the other workers' updates land. `tasks.defaults.default_cpu_workers`
picks a run's default (NMT Hogwild: replica, otherwise in place).
"""
from __future__ import annotations

import os


class DeviceError(ValueError):
    """The requested devices do not exist on this machine."""


def visible_gpus() -> int:
    """Number of CUDA GPUs torch can see (0 when torch has no CUDA support)."""
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    return torch.cuda.device_count()


def describe_visible() -> str:
    import torch

    if not torch.backends.cuda.is_built():
        return f"this torch ({torch.__version__}) is built without CUDA, so no GPU is visible"
    count = torch.cuda.device_count()
    where = os.environ.get("CUDA_VISIBLE_DEVICES")
    limited = f" (CUDA_VISIBLE_DEVICES={where!r})" if where is not None else ""
    return f"{count} CUDA GPU{'s' if count != 1 else ''} visible{limited}"


CPU_WORKERS = {"in-place": "cpu", "replica": "cpu-replica"}  # --cpu-workers -> the engine's device string


def worker_devices(gpus: int, workers: int, mode: str = "hogwild", per_gpu: int = 1,
                   cpu_workers: str = "in-place") -> list[str]:
    """One device string per worker; raises DeviceError naming what is visible when gpus > visible GPUs. With GPUs,
    `per_gpu` workers share each one (cuda:0, cuda:0, cuda:1, ...): concurrency on a machine with fewer GPUs.
    Without, `cpu_workers` (a key of CPU_WORKERS) says how the CPU workers train."""
    if gpus:
        available = visible_gpus()
        if gpus > available:
            raise DeviceError(f"--gpus {gpus}: {describe_visible()}. Train on CPU cores instead with "
                              f"--workers {gpus} (or ask for at most --gpus {available})" if available else
                              f"--gpus {gpus}: {describe_visible()}. Train on CPU cores instead with "
                              f"--workers {gpus}")
        if mode == "single":
            return ["cuda:0"]
        return [f"cuda:{i}" for i in range(gpus) for _ in range(per_gpu)]
    return [CPU_WORKERS[cpu_workers]] * (1 if mode == "single" else workers)
