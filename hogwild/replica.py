"""Where a worker computes: directly on the shared CPU parameters, or on a private replica on a device.

A CPU worker ('cpu') trains in place on the shared parameters: forward reads them, backward writes this process's
private `.grad`, the shared optimizer updates them. A device worker ('cuda:N', or 'cpu-replica' which runs the
same path on the CPU so it is tested without a GPU) holds a replica: every step it pulls the shared parameters
host->device, computes on the replica, pushes the gradients device->host into page-locked buffers and hands them
to the shared optimizer as the shared parameters' `.grad`.

Usage: `params = make_parameters(model, "cpu-replica"); net = params.pull(); ...backward...; params.push()`
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


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


class SharedParameters:
    """'cpu': compute on the shared parameters themselves; pull and push move nothing."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.shared = list(model.parameters())
        self.grad_params = self.shared  # the tensors whose .grad backward fills
        self.device = torch.device("cpu")

    def pull(self) -> nn.Module:
        return self.model

    def push(self) -> None:
        """The gradients already sit on the shared parameters' (process-private) .grad."""

    def clear(self) -> None:
        for param in self.shared:
            param.grad = None


class DeviceReplica:
    """A private copy of the model on `device`, refreshed from the shared parameters every step."""

    def __init__(self, model: nn.Module, device: str):
        self.device = torch_device(device)
        self.shared = list(model.parameters())
        self.shared_buffers = list(model.buffers())
        self.replica = copy.deepcopy(model).to(self.device)  # deepcopy: private storage, never shared
        self.grad_params = list(self.replica.parameters())
        self.replica_buffers = list(self.replica.buffers())
        self.cuda = self.device.type == "cuda"
        # Page-locked host buffers for the dense gradients: device->host copies can then run asynchronously.
        self.host_grads = [torch.empty(p.shape, dtype=p.dtype, pin_memory=self.cuda) for p in self.shared]

    @torch.no_grad()
    def pull(self) -> nn.Module:
        """Copy the shared parameters (and buffers) host->device into the replica."""
        for replica, shared in zip(self.grad_params, self.shared):
            replica.copy_(shared, non_blocking=self.cuda)
        for replica, shared in zip(self.replica_buffers, self.shared_buffers):
            replica.copy_(shared, non_blocking=self.cuda)
        return self.replica

    @torch.no_grad()
    def push(self) -> None:
        """Copy the replica's gradients device->host and attach them to the shared parameters as .grad."""
        for shared, replica, host in zip(self.shared, self.grad_params, self.host_grads):
            grad = replica.grad
            if grad is None:
                shared.grad = None
            elif grad.is_sparse:  # row sets vary per step: no fixed buffer
                shared.grad = grad.coalesce().to("cpu")
            else:
                host.copy_(grad, non_blocking=self.cuda)
                shared.grad = host
        for shared, replica in zip(self.shared_buffers, self.replica_buffers):
            shared.copy_(replica, non_blocking=self.cuda)  # running statistics flow back, Hogwild style
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()

    def clear(self) -> None:
        for param in self.grad_params:
            param.grad = None
        for param in self.shared:
            param.grad = None


def make_parameters(model: nn.Module, device: str) -> SharedParameters | DeviceReplica:
    return SharedParameters(model) if device == "cpu" else DeviceReplica(model, device)
