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

import torch
from torch import Tensor


class PrefetchPull:
    """Double-buffered copies of the shared parameters (and buffers) into a device replica's tensors.

    On a GPU the parameters travel on their own stream, which waits only for the previous make_current (so the copy
    overlaps the step that is computing); the buffers travel both ways on a second small stream, so that a step's
    buffers reach the shared model before the next prefetch reads them, without waiting for the gradients' copy."""

    def __init__(self, shared: list[Tensor], targets: list[Tensor], shared_buffers: list[Tensor],
                 target_buffers: list[Tensor], device: torch.device):
        self.shared, self.targets = shared, targets
        self.shared_buffers, self.target_buffers = shared_buffers, target_buffers
        self.cuda = device.type == "cuda"
        self.next = [torch.empty_like(t) for t in targets]  # the second device buffer, one tensor per parameter
        self.next_buffers = [torch.empty_like(t) for t in target_buffers]
        if self.cuda:
            self.stream, self.buffer_stream = torch.cuda.Stream(device), torch.cuda.Stream(device)
            self.event = torch.cuda.Event()  # recorded after the last prefetch's parameter copies
            self.buffers_in = torch.cuda.Event()  # ... and its buffer copies
            self.current = torch.cuda.Event()  # recorded after make_current has read `next`
        else:
            self.stream = self.buffer_stream = self.event = self.buffers_in = self.current = None
        self.pending: int | None = None  # the version of a prefetch not yet made current
        self.version: int | None = None  # the version the replica holds

    @torch.no_grad()
    def prefetch(self, version: int) -> None:
        """Start copying the shared parameters as they are now (global update count `version`) into the second
        buffer: on a GPU asynchronously, beside the step that is computing."""
        if not self.cuda:
            for target, source in zip(self.next + self.next_buffers, self.shared + self.shared_buffers):
                target.copy_(source)
        else:
            self.stream.wait_event(self.current)  # `next` has been read by the previous make_current
            with torch.cuda.stream(self.stream):
                for target, source in zip(self.next, self.shared):
                    target.copy_(source, non_blocking=True)
                self.event.record(self.stream)
            self.buffer_stream.wait_event(self.current)
            with torch.cuda.stream(self.buffer_stream):  # after the last push_buffers, on this stream
                for target, source in zip(self.next_buffers, self.shared_buffers):
                    target.copy_(source, non_blocking=True)
                self.buffers_in.record(self.buffer_stream)
        self.pending = version

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
            torch.cuda.current_stream().wait_event(self.buffers_in)
        torch._foreach_copy_(self.targets, self.next)
        for target, source in zip(self.target_buffers, self.next_buffers):
            target.copy_(source)
        if self.cuda:
            self.current.record()
        self.version, self.pending = self.pending, None
        return self.version

    @torch.no_grad()
    def push_buffers(self) -> None:
        """The replica's buffers back into the shared ones, Hogwild style, after the step queued so far (on a GPU
        asynchronously: `finish` waits for the last)."""
        if not self.cuda:
            for shared, replica in zip(self.shared_buffers, self.target_buffers):
                shared.copy_(replica)
            return
        self.buffer_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.buffer_stream):
            for shared, replica in zip(self.shared_buffers, self.target_buffers):
                shared.copy_(replica, non_blocking=True)

    def finish(self) -> None:
        """Wait for the copies still in flight (the last step's buffers reach the shared model)."""
        if self.cuda:
            self.buffer_stream.synchronize()
            self.stream.synchronize()
