"""Step 2 of `hogwild.train`, share: move the model and the optimizer state to shared memory, create the shared
counters and the run control, and load a resumed run into them (after checking /dev/shm and the machine can hold
it). The `SharedRun` it returns is what the parent and every worker share.

Usage (engine.py): `shared = share(model, config, saved, run_dir, len(batches), batch_bytes)`
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import Config
from ..shared_optim import SharedOptimizer, trainable_parameters, unique_nbytes
from .checkpoint import RunCheckpoints, StartPosition, resume
from .resources import check_resources, check_shared_memory, removing_leaked_shm, shared_memory_need
from .run_state import RunControl, SharedCounters, StepBudget


@dataclass
class SharedRun:
    """What the parent shares with every worker, and where the data feed starts."""

    config: Config
    model: nn.Module
    optimizer: SharedOptimizer
    counters: SharedCounters
    control: RunControl  # the stop and start flags
    start: StartPosition
    checkpoints: RunCheckpoints
    budget: StepBudget | None = None  # with max_steps; held here, as its lock must outlive the workers' start-up


def share(model: nn.Module, config: Config, saved: dict | None, run_dir: str | None, n_batches: int,
          batch_bytes: int) -> SharedRun:
    """Move the model and the optimizer state to shared memory and load a resumed run into them. n_batches: those
    of an epoch (the checkpoint's data position); batch_bytes: what the parent holds of them, in the memory check."""
    for param in model.parameters():
        param.grad = None  # a .grad would otherwise be moved to shared memory and summed into by every worker
    params = trainable_parameters(model)  # frozen parameters are shared with the model but get no optimizer state
    optimizer_bytes = SharedOptimizer.state_nbytes(params, config.optimizer, **config.optimizer_args)
    check_resources(config.devices, config.threads_per_worker, unique_nbytes(model.state_dict()), optimizer_bytes,
                    batch_bytes)
    if config.check_shm:
        check_shared_memory(shared_memory_need(
            _storage_nbytes(model) + SharedOptimizer.state_tensor_nbytes(params, config.optimizer,
                                                                        **config.optimizer_args)))
    with removing_leaked_shm():  # a full /dev/shm (check_shm=False, or filled meanwhile) fails in torch
        model.share_memory()
        optimizer = SharedOptimizer(params, config.optimizer, **config.optimizer_args)
        counters = SharedCounters(config.workers)
        control = RunControl()
    torch.manual_seed(config.seed)
    start = resume(saved, model, optimizer, counters, config)
    checkpoints = RunCheckpoints(run_dir, model, optimizer, counters, config, n_batches, start,
                                 saved.get("evaluator") if saved else None)
    return SharedRun(config, model, optimizer, counters, control, start, checkpoints)


def _storage_nbytes(model: nn.Module) -> list[int]:
    """Bytes of each storage model.share_memory() moves to /dev/shm (tied tensors share one; shared ones stay)."""
    storages = {}
    for tensor in model.state_dict().values():
        if not tensor.is_shared():
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return list(storages.values())
