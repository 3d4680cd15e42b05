"""Where a worker computes: directly on the shared CPU parameters, or on a private replica on a device.

A CPU worker ('cpu') trains in place on the shared parameters: forward reads them, backward writes this process's
private `.grad`, the shared optimizer updates them. A device worker ('cuda:N', or 'cpu-replica' which runs the
same path on the CPU so it is tested without a GPU) holds a replica: every step it pulls the shared parameters
host->device, computes on the replica, and hands the gradients, copied device->host into page-locked buffers, to
the shared optimizer. Each dense gradient's copy starts the moment backward has accumulated it (a post-accumulate-
grad hook; on a GPU on a side stream), so the copies overlap the rest of backward. With two buffer sets, update k
can read one set while backward k+1 fills the other.

Only the parameters that require grad are pulled, hooked and pushed, each tied Parameter once
(shared_optim.trainable_parameters).
Frozen parameters reach a replica when it is made (a copy of the shared model, resumed values included) and, like
the buffers, are never given a gradient; nothing changes them during a run, so no step pulls them again.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage: `params = make_parameters(model, "cpu-replica"); net = params.pull(batch); ...backward...;
grads = params.push(); ...update with grads...; params.clear()`
"""
from __future__ import annotations

import copy
import functools
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

    def pull(self, batch: Any = None, dense: bool = True) -> nn.Module:
        return self.model

    def push(self) -> None:
        """None: the gradients already sit on the shared parameters' (process-private) .grad."""

    def clear(self) -> None:
        for param in self.shared:
            param.grad = None


class DeviceReplica:
    """A private copy of the model on `device`, refreshed from the shared parameters every step.

    copy_in_backward: start each dense gradient's device->host copy when backward produces it (False: at push(),
    for sync mode, which averages the gradients on the device first). buffer_sets: 2 lets an update read one set of
    host gradients while the next backward fills the other. sparse_rows: pull only the rows of sparse embedding
    tables whose ids appear in the batch (a forward pre-hook checks, without a device sync, that no other row is
    read; push() raises if one was)."""

    def __init__(self, model: nn.Module, device: str, *, copy_in_backward: bool = True, buffer_sets: int = 1,
                 sparse_rows: bool = False):
        self.device = torch_device(device)
        self.cuda = self.device.type == "cuda"
        self.shared = trainable_parameters(model)
        self.shared_buffers = list(model.buffers())
        # deepcopy: private storage, never shared; it keeps tied parameters tied and copies the frozen ones' values
        self.replica = copy.deepcopy(model).to(self.device)
        self.grad_params = trainable_parameters(self.replica)
        self.replica_buffers = list(self.replica.buffers())
        self.tables = sparse_tables(self.replica)
        # Page-locked host buffers for the dense gradients only: sparse gradients' row sets vary per step.
        self.host_sets = [[None if i in self.tables else torch.empty(p.shape, dtype=p.dtype, pin_memory=self.cuda)
                           for i, p in enumerate(self.shared)] for _ in range(buffer_sets)]
        self.slot = 0  # the buffer set this step's gradients go to
        self.copied = [False] * len(self.shared)  # which dense gradients this step copied out
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.copy_in_backward = copy_in_backward
        if copy_in_backward:
            for index, param in enumerate(self.grad_params):
                if index not in self.tables:
                    param.register_post_accumulate_grad_hook(functools.partial(self._copy_out, index))
        self.sparse_rows = sparse_rows and bool(self.tables)
        if self.sparse_rows:
            self.pulled = {i: torch.zeros(t.weight.shape[0], dtype=torch.bool, device=self.device)
                           for i, t in self.tables.items()}  # rows of each table pulled this step
            self.missing = torch.zeros((), dtype=torch.bool, device=self.device)  # read a row not pulled?
            for index, table in self.tables.items():
                table.register_forward_pre_hook(functools.partial(self._check_rows, index))

    @torch.no_grad()
    def _copy_out(self, index: int, param: Tensor) -> None:
        """Post-accumulate-grad hook: copy this gradient device->host now, behind the op that produced it."""
        host = self.host_sets[self.slot][index]
        if self.cuda:
            self.copy_stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.copy_stream):
                host.copy_(param.grad, non_blocking=True)
        else:
            host.copy_(param.grad)
        self.copied[index] = True

    def _check_rows(self, index: int, table: nn.Module, inputs: tuple) -> None:
        self.missing |= ~self.pulled[index][inputs[0]].all()  # on the device: no sync

    @torch.no_grad()
    def pull(self, batch: Any = None, dense: bool = True) -> nn.Module:
        """Copy the shared parameters (and buffers) host->device into the replica; with sparse_rows, only the
        rows of the sparse tables that `batch` (on the CPU) can index. dense=False (Config.pull_every) keeps the
        replica's other parameters and buffers as they are: only those sparse rows are pulled."""
        ids = batch_ids(batch) if self.sparse_rows else None
        for index, (replica, shared) in enumerate(zip(self.grad_params, self.shared)):
            if ids is not None and index in self.tables:
                rows = ids[(ids >= 0) & (ids < shared.shape[0])]  # (R,)
                on_device = rows.to(self.device, non_blocking=self.cuda)
                replica.index_copy_(0, on_device, shared.index_select(0, rows).to(self.device, non_blocking=self.cuda))
                self.pulled[index].zero_().index_fill_(0, on_device, True)
            elif dense:
                replica.copy_(shared, non_blocking=self.cuda)
        for replica, shared in zip(self.replica_buffers, self.shared_buffers) if dense else ():
            replica.copy_(shared, non_blocking=self.cuda)
        return self.replica

    @torch.no_grad()
    def push(self) -> list[Tensor | None]:
        """This step's gradients on the host, one per shared parameter (None where backward gave none); waits for
        the device->host copies. Buffers (running statistics) flow back into the shared ones, Hogwild style."""
        grads: list[Tensor | None] = []
        for index, (replica, host) in enumerate(zip(self.grad_params, self.host_sets[self.slot])):
            grad = replica.grad
            if grad is None:
                grads.append(None)
            elif grad.is_sparse:
                grads.append(grad.coalesce().to("cpu"))
            elif host is None:  # a sparse table's gradient made dense (sync mode averages densely)
                grads.append(grad.to("cpu"))
            else:
                if not self.copied[index]:
                    self._copy_out(index, replica)
                grads.append(host)
        for shared, replica in zip(self.shared_buffers, self.replica_buffers):
            shared.copy_(replica, non_blocking=self.cuda)
        if self.cuda:
            self.copy_stream.synchronize()
            torch.cuda.current_stream(self.device).synchronize()
        if self.sparse_rows and bool(self.missing):
            raise RuntimeError("Config.sparse_pull: the model read a row of a sparse embedding whose id is not in "
                               "its batch's integer tensors; train without sparse_pull")
        return grads

    def clear(self) -> None:
        """Drop this step's gradients; the next step's go to the other buffer set (if there are two)."""
        for param in self.grad_params:
            param.grad = None
        self.copied = [False] * len(self.shared)
        self.slot = (self.slot + 1) % len(self.host_sets)


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


def make_parameters(model: nn.Module, device: str, **options: Any) -> SharedParameters | DeviceReplica:
    """'cpu' -> SharedParameters; a device -> DeviceReplica(model, device, **options)."""
    return SharedParameters(model) if device == "cpu" else DeviceReplica(model, device, **options)
