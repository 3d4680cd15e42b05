"""The arithmetic of multi-host exchanges, free of MPI so that it is tested serially against closed forms.

Usage: `flat = FlatParams(list(model.parameters())); x = flat.snapshot(); flat.add_(delta)`.

Every exchange is applied as a DELTA to the live shared parameters (`p += new - snapshot`) rather than by overwriting
them: local Hogwild workers keep training while a host talks to others, and their updates made in the meantime must
survive the exchange.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch


class FlatParams:
    """A flat float32 view of a list of shared parameter tensors (all floating point, all on the CPU)."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        params = [p for p in params]
        if not params:
            raise ValueError("FlatParams: the model has no parameters")
        for i, p in enumerate(params):
            if p.device.type != "cpu" or not p.is_floating_point():
                raise ValueError(f"FlatParams: parameter {i} must be a floating-point CPU tensor, "
                                 f"got {p.dtype} on {p.device}")
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.numel = sum(self.sizes)

    def snapshot(self) -> np.ndarray:
        """A private float32 copy of all parameters, concatenated in order.  # (N,)"""
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1).to(torch.float32) for p in self.params]).numpy()

    def add_(self, delta: np.ndarray, start: int = 0) -> None:
        """params[start : start + len(delta)] += delta, in place on the shared tensors (lock-free, like a worker)."""
        delta_t = torch.from_numpy(np.ascontiguousarray(delta, dtype=np.float32))
        stop, offset = start + delta_t.numel(), 0
        with torch.no_grad():
            for p, size in zip(self.params, self.sizes):
                lo, hi = max(start, offset), min(stop, offset + size)
                if lo < hi:
                    p.view(-1)[lo - offset:hi - offset].add_(delta_t[lo - start:hi - start].to(p.dtype))
                offset += size

    def assign_(self, values: np.ndarray) -> None:
        """params = values, exactly (used only when no local worker is running: start, resume and the final model;
        p + (values - p) would differ from values in the last bit, and the ranks' final models with it)."""
        values_t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
        offset = 0
        with torch.no_grad():
            for p, size in zip(self.params, self.sizes):
                p.view(-1).copy_(values_t[offset:offset + size].to(p.dtype))
                offset += size


def partition_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """Split 0..numel into `parts` contiguous, nearly equal [start, stop) ranges, one per parameter server."""
    if parts < 1:
        raise ValueError(f"partition_bounds: parts must be >= 1, got {parts}")
    edges = [numel * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


def elastic_difference(x: np.ndarray, center: np.ndarray, alpha: float) -> np.ndarray:
    """EASGD (Zhang et al. 2015): d = alpha (x - center); the host does x -= d and the server does center += d."""
    return (alpha * (x - center)).astype(np.float32)


def pair_average_delta(own: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """AD-PSGD mixing with weights 0.5/0.5: the delta that moves `own` to (own + peer) / 2."""
    return ((own + peer) * np.float32(0.5) - own).astype(np.float32)


def ring_pairing(index: int, hosts: int) -> tuple[bool, list[int]]:
    """(active?, neighbours) of training host `index` on a ring of `hosts`, with an active/passive split.

    Even hosts are active (they start every mixing), odd hosts passive (they only answer): every pair has exactly one
    initiator, so no two hosts ever wait on each other. Neighbours are ring neighbours of the other kind; with an odd
    number of hosts the ring edge between the last (even) host and host 0 is dropped, leaving a connected path.
    """
    if not 0 <= index < hosts:
        raise ValueError(f"ring_pairing: index {index} outside 0..{hosts - 1}")
    active = index % 2 == 0
    candidates = {(index - 1) % hosts, (index + 1) % hosts} - {index}
    return active, sorted(q for q in candidates if (q % 2 == 0) != active)


class DownpourTracker:
    """What a DOWNPOUR host has not yet pushed: the local change since the last push or fetch (Dean et al. 2012)."""

    def __init__(self, start: np.ndarray) -> None:
        self.reference = start.copy()  # parameter values already accounted for by the servers

    def push(self, current: np.ndarray, arrives: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """The accumulated update to send (current - reference); afterwards the servers account for `current`.
        arrives(update): what the servers will add (a 16-bit wire format rounds it); what the rounding lost is then
        left in the next update (error feedback), not lost."""
        delta = (current - self.reference).astype(np.float32)
        if arrives is None:
            self.reference = current.copy()
            return delta
        arrived = arrives(delta)
        self.reference = self.reference + arrived
        return arrived

    def fetch(self, central: np.ndarray, current: np.ndarray) -> np.ndarray:
        """The delta that makes the host central + (its unpushed local change); the servers then account for central."""
        delta = (central + (current - self.reference) - current).astype(np.float32)
        self.reference = central.copy()
        return delta
