"""The graphed step's pull, off the critical path: the next step's parameters are copied from the shared (page-locked)
parameters into a second device buffer on a copy stream while the current step computes; between steps one
device->device copy makes them the replica's own (the CUDA graphs' static parameters keep their addresses, so every
graph reads them; two graphs per bucket, one per buffer, would double capture time and graph memory to save that
copy, which moves each parameter once at the device's memory bandwidth).

Versions: a prefetch records the global update count when it was issued (`view.global_updates()`), and the step that
makes it current trains on exactly those parameters, so staleness is counted as for the eager pull. Whoever issues a
prefetch decides which updates it sees: the worker issues it once the previous update has landed, and an update
held for overlap (updates.py) waits for the prefetch's copies (`event`) before it writes the shared parameters.
Buffers (running statistics, counters) travel with the parameters, and back to the shared model after each step.

On the CPU ('cpu-replica') the same object copies at once: what a step trains on is still the prefetched copy, which
is what its tests check.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage: `pull = PrefetchPull(shared, replica_params, shared_buffers, replica_buffers, device)`;
`pull.prefetch(view.global_updates())` while a step computes; `version = pull.make_current()` before the next one.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor


class PrefetchPull:
    """Double-buffered copies of the shared parameters (and buffers) into a device replica's tensors."""

    def __init__(self, shared: list[Tensor], targets: list[Tensor], shared_buffers: list[Tensor],
                 target_buffers: list[Tensor], device: torch.device):
        self.shared, self.targets = shared, targets
        self.shared_buffers, self.target_buffers = shared_buffers, target_buffers
        self.cuda = device.type == "cuda"
        self.next = [torch.empty_like(t) for t in targets]  # the second device buffer, one tensor per parameter
        self.next_buffers = [torch.empty_like(t) for t in target_buffers]
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.event = torch.cuda.Event() if self.cuda else None  # recorded after the last prefetch's copies
        self.pending: int | None = None  # the version of a prefetch not yet made current
        self.version: int | None = None  # the version the replica holds

    @torch.no_grad()
    def prefetch(self, version: int) -> None:
        """Start copying the shared parameters as they are now (global update count `version`) into the second
        buffer: on a GPU asynchronously on the copy stream, after the device work queued so far."""
        if not self.cuda:
            self._copy_in()
        else:
            self.stream.wait_stream(torch.cuda.current_stream())  # the previous make_current has read `next`
            with torch.cuda.stream(self.stream):
                self._copy_in()
                self.event.record(self.stream)
        self.pending = version

    def _copy_in(self) -> None:
        for target, source in zip(self.next + self.next_buffers, self.shared + self.shared_buffers):
            target.copy_(source, non_blocking=self.cuda)

    @torch.no_grad()
    def make_current(self) -> int:
        """Make the last prefetch the replica's parameters (the compute stream waits for its copies); returns the
        version the replica now holds (unchanged when nothing was prefetched since: Config.pull_every)."""
        if self.pending is None:
            if self.version is None:
                raise RuntimeError("PrefetchPull.make_current before the first prefetch")
            return self.version
        if self.cuda:
            torch.cuda.current_stream().wait_event(self.event)
        torch._foreach_copy_(self.targets, self.next)
        for target, source in zip(self.target_buffers, self.next_buffers):
            target.copy_(source)
        self.version, self.pending = self.pending, None
        return self.version

    @torch.no_grad()
    def push_buffers(self, stream: torch.cuda.Stream | None = None) -> None:
        """The replica's buffers back into the shared ones, Hogwild style (on a GPU on `stream`, asynchronously)."""
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for shared, replica in zip(self.shared_buffers, self.target_buffers):
                shared.copy_(replica, non_blocking=self.cuda)

