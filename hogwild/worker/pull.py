"""A device worker's pull, off the critical path: the next step's parameters are copied from the shared (page-locked)
parameters into a second device buffer on a copy stream while the current step computes; between steps one
device->device copy makes them the replica's own (the CUDA graphs' static parameters keep their addresses, so every
graph reads them; two graphs per bucket, one per buffer, would double capture time and graph memory to save that
copy, which moves each parameter once at the device's memory bandwidth).

Sparse tables (Config.sparse_pull): a table's rows are pulled by the ids of the batch the step will train on (its
integer tensors, known on the host: replica.batch_ids), at every prefetch, and written into the replica's table by
index; the rest of the table is never copied (the step reads no other row: copy_out.py checks it). Dense parameters
and the other tables travel whole, every Config.pull_every steps (a prefetch with version None moves rows only).

Versions: a prefetch records the global update count when it was issued (`view.global_updates()`), and the step that
makes it current trains on those parameters, so staleness is counted as for any pull. Whoever issues a prefetch
decides which updates it sees: serially, after the worker's own last update; overlapped, beside the update in
flight, which it does not wait for (updates.py): it may read part of it, which then counts as not read.
Buffers (running statistics, counters) travel with the parameters, and back to the shared model after each step.

On the CPU ('cpu-replica') the same object copies at once: what a step trains on is still the prefetched copy, which
is what its tests check.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

Usage: `pull = PrefetchPull(shared, replica_params, shared_buffers, replica_buffers, device, rows={index: capacity})`;
`pull.prefetch(view.global_updates(), batch)` while a step computes; `version = pull.make_current()` before the next.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .replica import batch_ids


class RowPull:
    """One sparse table's rows of the next batch: host staging (page-locked on a GPU, two slots so that a prefetch
    never overwrites rows still on their way), device staging, and the count of the pending rows."""

    def __init__(self, shared: Tensor, capacity: int, device: torch.device):
        cuda = device.type == "cuda"
        capacity = min(capacity, shared.shape[0])
        self.shared = shared
        self.host = [torch.empty((capacity, *shared.shape[1:]), dtype=shared.dtype, pin_memory=cuda)
                     for _ in range(2)]
        self.host_ids = [torch.empty(capacity, dtype=torch.int64, pin_memory=cuda) for _ in range(2)]
        self.rows = torch.empty((capacity, *shared.shape[1:]), dtype=shared.dtype, device=device)
        self.ids = torch.empty(capacity, dtype=torch.int64, device=device)
        self.pending = 0  # rows waiting for make_current

    def gather(self, ids: Tensor, slot: int) -> int:
        """Copy the table's rows at `ids` (host, sorted distinct; those past the table are ignored) into host slot
        `slot`; returns their count."""
        ids = ids[(ids >= 0) & (ids < self.shared.shape[0])]
        if len(ids) > len(self.ids):
            raise RuntimeError(f"Config.sparse_pull: a batch holds {len(ids)} distinct ids for a table whose row "
                               f"capacity is {len(self.ids)}")
        torch.index_select(self.shared, 0, ids, out=self.host[slot][:len(ids)])
        self.host_ids[slot][:len(ids)] = ids
        return len(ids)


class PrefetchPull:
    """Double-buffered copies of the shared parameters (and buffers) into a device replica's tensors.

    On a GPU the parameters travel on their own stream, which waits only for the previous make_current (so the copy
    overlaps the step that is computing); the buffers travel both ways on a second small stream, so that a step's
    buffers reach the shared model before the next prefetch reads them, without waiting for the gradients' copy.
    rows: index of a sparse table in `shared` -> its row capacity (the most distinct ids a batch can hold), for the
    tables pulled by rows (Config.sparse_pull)."""

    def __init__(self, shared: list[Tensor], targets: list[Tensor], shared_buffers: list[Tensor],
                 target_buffers: list[Tensor], device: torch.device, rows: dict[int, int] | None = None):
        self.shared, self.targets = shared, targets
        self.shared_buffers, self.target_buffers = shared_buffers, target_buffers
        self.cuda = device.type == "cuda"
        self.tables = {i: RowPull(shared[i], capacity, device) for i, capacity in (rows or {}).items()}
        self.whole = [i for i in range(len(shared)) if i not in self.tables]  # pulled whole, every dense prefetch
        self.next = {i: torch.empty_like(targets[i]) for i in self.whole}  # the second device buffer
        self.next_buffers = [torch.empty_like(t) for t in target_buffers]
        self.slot = 0  # the host staging slot of the rows' next prefetch
        self.prefetched: tuple[Any, Tensor] | None = None  # (batch, its ids) of the last prefetch by rows
        if self.cuda:
            self.stream, self.buffer_stream = torch.cuda.Stream(device), torch.cuda.Stream(device)
            self.event = torch.cuda.Event()  # recorded after the last prefetch's parameter copies
            self.buffers_in = torch.cuda.Event()  # ... and its buffer copies
            self.current = torch.cuda.Event()  # recorded after make_current has read `next`
            self.staged = [torch.cuda.Event(), torch.cuda.Event()]  # a host slot's rows have left for the device
        else:
            self.stream = self.buffer_stream = self.event = self.buffers_in = self.current = self.staged = None
        self.pending: int | None = None  # the version of a dense prefetch not yet made current
        self.version: int | None = None  # the version the replica holds

    @torch.no_grad()
    def prefetch(self, version: int | None, batch: Any = None) -> None:
        """Start copying the shared parameters as they are now (global update count `version`) into the second
        buffer: on a GPU asynchronously, beside the step that is computing. version None (Config.pull_every): only
        the sparse tables' rows. batch: the host batch the step will train on (its ids pick the rows)."""
        ids = batch_ids(batch) if self.tables else None
        self.prefetched = (batch, ids) if self.tables else None
        for table in self.tables.values():
            if self.cuda:
                self.staged[self.slot].synchronize()  # this host slot's rows of two prefetches ago have left
            table.pending = table.gather(ids, self.slot)
        dense = version is not None
        if not self.cuda:
            for i in self.whole if dense else ():
                self.next[i].copy_(self.shared[i])
            for target, source in zip(self.next_buffers, self.shared_buffers) if dense else ():
                target.copy_(source)
            for table in self.tables.values():
                table.rows[:table.pending].copy_(table.host[self.slot][:table.pending])
                table.ids[:table.pending].copy_(table.host_ids[self.slot][:table.pending])
        else:
            self.stream.wait_event(self.current)  # `next` has been read by the previous make_current
            with torch.cuda.stream(self.stream):
                for i in self.whole if dense else ():
                    self.next[i].copy_(self.shared[i], non_blocking=True)
                for table in self.tables.values():
                    table.rows[:table.pending].copy_(table.host[self.slot][:table.pending], non_blocking=True)
                    table.ids[:table.pending].copy_(table.host_ids[self.slot][:table.pending], non_blocking=True)
                self.staged[self.slot].record(self.stream)
                self.event.record(self.stream)
            if dense:
                self.buffer_stream.wait_event(self.current)
                with torch.cuda.stream(self.buffer_stream):  # after the last push_buffers, on this stream
                    for target, source in zip(self.next_buffers, self.shared_buffers):
                        target.copy_(source, non_blocking=True)
                    self.buffers_in.record(self.buffer_stream)
        self.slot = 1 - self.slot
        if dense:
            self.pending = version

    def ids_of(self, batch: Any) -> Tensor:
        """batch_ids(batch), from the prefetch that pulled its rows when it did (the worker's loop pulls and trains on
        the same batch object): computed once a step, not twice."""
        if self.prefetched is not None and self.prefetched[0] is batch:
            return self.prefetched[1]
        return batch_ids(batch)

    @torch.no_grad()
    def make_current(self) -> int:
        """Make the last prefetch the replica's parameters (the compute stream waits for its copies); returns the
        version the replica's dense parameters hold (unchanged without a dense prefetch since: Config.pull_every)."""
        if self.pending is None and self.version is None:
            raise RuntimeError("PrefetchPull.make_current before the first prefetch")
        if self.cuda:
            torch.cuda.current_stream().wait_event(self.event)
            if self.pending is not None:
                torch.cuda.current_stream().wait_event(self.buffers_in)
        if self.pending is not None:
            torch._foreach_copy_([self.targets[i] for i in self.whole], [self.next[i] for i in self.whole])
            for target, source in zip(self.target_buffers, self.next_buffers):
                target.copy_(source)
            self.version, self.pending = self.pending, None
        for i, table in self.tables.items():
            self.targets[i].index_copy_(0, table.ids[:table.pending], table.rows[:table.pending])
        if self.cuda:
            self.current.record()
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
