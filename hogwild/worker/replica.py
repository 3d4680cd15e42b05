"""Where the sync worker (sync.py) computes: directly on the shared CPU parameters, or on a private replica on a
device; and the helpers every worker's step uses to reach a device (batches, ids, sparse tables, page-locked memory).

A 'cpu' sync worker trains in place on the shared parameters: forward reads them, backward writes this process's
private `.grad`. A device sync worker ('cuda:N', or 'cpu-replica' which runs the same path on the CPU so it is tested
without a GPU) holds a replica: every step it pulls the shared parameters host->device, computes on the replica, and,
once the ranks have averaged the gradients on the device, copies them device->host into page-locked buffers for the
shared optimizer. (A Hogwild worker's device step is device_step.py's, with its prefetched pull and one copy-out.)

Only the parameters that require grad are pulled and pushed, each tied Parameter once
(shared_optim.trainable_parameters). Frozen parameters reach a replica when it is made (a copy of the shared model,
resumed values included) and, like the buffers, are never given a gradient; nothing changes them during a run, so no
step pulls them again.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage: `params = make_parameters(model, "cpu-replica"); net = params.pull(); ...backward, average...;
grads = params.push(); ...update with grads...; params.clear()`
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from ..shared_optim import trainable_parameters


def torch_device(device: str) -> torch.device:
    """'cpu-replica' computes on the CPU."""
    return torch.device("cpu" if device == "cpu-replica" else device)


def move_batch(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """The batch (tensor, tuple/list or dict of tensors, nested) on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {key: move_batch(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [move_batch(value, device, non_blocking) for value in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def batch_ids(batch: Any) -> Tensor:
    """Every distinct value of the batch's integer tensors (word ids, char ids, lengths...), sorted. (K,) int64"""
    if isinstance(batch, torch.Tensor):
        integer = not batch.dtype.is_floating_point and not batch.dtype.is_complex and batch.dtype != torch.bool
        return batch.reshape(-1).to(torch.int64).unique() if integer else torch.empty(0, dtype=torch.int64)
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    parts = [batch_ids(value) for value in values]
    return torch.cat(parts).unique() if parts else torch.empty(0, dtype=torch.int64)


def sparse_tables(model: nn.Module) -> dict[int, nn.Module]:
    """Index in trainable_parameters(model) -> the trainable nn.Embedding / nn.EmbeddingBag(sparse=True) that owns
    it (its gradient is sparse); frozen tables get no gradient."""
    index = {id(param): i for i, param in enumerate(trainable_parameters(model))}
    return {index[id(m.weight)]: m for m in model.modules()
            if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse and id(m.weight) in index}


class SharedParameters:
    """'cpu': compute on the shared parameters themselves; pull and push move nothing."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.shared = trainable_parameters(model)
        self.shared_buffers = list(model.buffers())
        self.grad_params = self.shared  # the tensors whose .grad backward fills
        self.device = torch.device("cpu")

    def pull(self) -> nn.Module:
        return self.model

    def push(self) -> None:
        """None: the gradients already sit on the shared parameters' (process-private) .grad."""

    def clear(self) -> None:
        for param in self.shared:
            param.grad = None


class DeviceReplica:
    """A private copy of the model on `device`, refreshed from the shared parameters every step."""

    def __init__(self, model: nn.Module, device: str):
        self.device = torch_device(device)
        self.cuda = self.device.type == "cuda"
        self.shared = trainable_parameters(model)
        self.shared_buffers = list(model.buffers())
        # deepcopy: private storage, never shared; it keeps tied parameters tied and copies the frozen ones' values
        self.replica = copy.deepcopy(model).to(self.device)
        self.grad_params = trainable_parameters(self.replica)
        self.replica_buffers = list(self.replica.buffers())
        tables = sparse_tables(self.replica)
        # Page-locked host buffers for the dense gradients only: sparse gradients' row sets vary per step.
        self.host = [None if i in tables else torch.empty(p.shape, dtype=p.dtype, pin_memory=self.cuda)
                     for i, p in enumerate(self.shared)]

    @torch.no_grad()
    def pull(self) -> nn.Module:
        """Copy the shared parameters (and buffers) host->device into the replica."""
        for replica, shared in zip(self.grad_params + self.replica_buffers, self.shared + self.shared_buffers):
            replica.copy_(shared, non_blocking=self.cuda)
        return self.replica

    @torch.no_grad()
    def push(self) -> list[Tensor | None]:
        """This step's gradients on the host, one per shared parameter (None where backward gave none); waits for
        the device->host copies. Buffers (running statistics) flow back into the shared ones, Hogwild style."""
        grads: list[Tensor | None] = []
        for replica, host in zip(self.grad_params, self.host):
            grad = replica.grad
            if grad is None:
                grads.append(None)
            elif grad.is_sparse:
                grads.append(grad.coalesce().to("cpu"))
            elif host is None:  # a sparse table's gradient made dense (sync mode averages densely)
                grads.append(grad.to("cpu"))
            else:
                grads.append(host.copy_(grad, non_blocking=self.cuda))
        for shared, replica in zip(self.shared_buffers, self.replica_buffers):
            shared.copy_(replica, non_blocking=self.cuda)
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        return grads

    def clear(self) -> None:
        """Drop this step's gradients."""
        for param in self.grad_params:
            param.grad = None


class PageLocked:
    """Registers the storages of host tensors page-locked with CUDA (cudaHostRegister), so copies between them
    and a GPU are asynchronous DMA instead of staged through a bounce buffer; close() unregisters them. Shared
    memory is mapped at a different address in every process, so each worker registers its own mapping."""

    def __init__(self, tensors: list[Tensor]):
        self.pointers: list[int] = []
        cudart = torch.cuda.cudart()
        try:
            for tensor in tensors:
                storage = tensor.untyped_storage()
                if storage.nbytes() == 0 or storage.data_ptr() in self.pointers:
                    continue
                torch.cuda.check_error(cudart.cudaHostRegister(storage.data_ptr(), storage.nbytes(), 0))
                self.pointers.append(storage.data_ptr())
        except torch.cuda.CudaError as error:
            self.close()
            raise RuntimeError(f"cudaHostRegister of the shared parameters failed ({error}); the locked-memory "
                               f"limit (ulimit -l) may be too low. Train with Config.pin_shared=False") from error
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        cudart = torch.cuda.cudart()
        while self.pointers:
            torch.cuda.check_error(cudart.cudaHostUnregister(self.pointers.pop()))


def make_parameters(model: nn.Module, device: str) -> SharedParameters | DeviceReplica:
    """'cpu' -> SharedParameters; a device -> DeviceReplica(model, device)."""
    return SharedParameters(model) if device == "cpu" else DeviceReplica(model, device)
