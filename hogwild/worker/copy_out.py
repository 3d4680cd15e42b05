"""A device worker's gradient copy-out (step_graph.py's step, graphed or eager): the gradients gathered on the device
into one flat buffer (the outbox), the norm, clipping and finiteness decided there too, then a device->host copy into
a page-locked slot that the update thread reads after the copy's event. No Python hook runs in backward and the
worker's main thread never waits for the device: the skip is decided one step late, by whoever reads the slot
(updates.py).

The outbox, one tensor of the parameters' dtype on the device, holds in order:
  - every dense gradient, flattened;
  - per sparse embedding table (nn.Embedding(sparse=True)): `capacity` rows of its gradient, gathered at the ids the
    host picked from the host-side batch (unique, sorted, padded to the capacity by repeating the first), each row
    multiplied by 1 if the table read that row in this step (and it is not the padding row) and by 0 otherwise;
  - per sparse table, those capacity 0/1 multipliers (the row mask);
  - three step statistics: finite (1/0), the loss, and missing (1 if a table read a row outside the host's ids).
The replica's tables give dense gradients (sparse gradients drop the padding row with a data-dependent shape, which
no CUDA graph can hold); the rows and the mask make them the sparse gradient the eager step pushes: the same rows,
the same values, coalesced (what torch's sparse gradient gives). Clipping multiplies the gradient part by
min(1, clip/(norm+1e-6)) computed in float64 from the same norms as gradients.global_norm, so the clipped values are an
in-place step's bit for bit (dense).

A step's copy-out moves only what its update reads: the dense gradients, the first n rows of each sparse table (n: the
ids the host chose for this batch, at most its capacity; the rest of the capacity holds no row of this step), the row
masks and the statistics - one contiguous copy per part (`segments`), not the whole capacity: only the rows a batch
touched travel, and its update writes only the rows the table read, as a 'cpu' worker's sparse gradient does.
On a GPU those parts are first copied device->device into one of two staging buffers (microseconds on HBM), so the
next step may overwrite the outbox while the copy to the host of this one runs on the copy stream. Two host slots
alternate: update k reads slot k % 2 while step k+1 fills the other. On the CPU the same code copies in place.
Page-locked staging that the host writes for a step (its ids here, its inputs in step_graph.py) is reused every other
step; `SlotEvents` makes each rewrite wait for the copies that read that slot two steps ago.

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes (step_graph.py builds it).

Usage: `outbox = GradientOutbox(params, tables, capacities, device)`; `ids = outbox.step_ids(host_ids, slot)`; inside
the step: `outbox.begin()` before the forward, `outbox.gather(loss, clip_norm, check)` after backward; then
`outbox.send(slot, [len(i) for i in ids])`; in the update thread `outbox.read(slot, present, ids)` -> (finite, loss,
grads).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn

STATS = 3  # finite, loss, missing


@dataclass
class SparseRows:
    """One sparse table's fixed-capacity rows in the outbox."""

    index: int  # position in the trained parameters
    table: nn.Module  # the replica's nn.Embedding / nn.EmbeddingBag
    capacity: int  # rows gathered per step: the most distinct ids any batch of the run can hold
    rows: slice  # of the outbox: capacity x dim gradient values
    mask: slice  # of the outbox: capacity multipliers, 1 where the table read the row
    touched: Tensor  # (table rows,) bool on the device: rows the table read this step (a forward pre-hook)
    ids: Tensor  # (capacity + 1,) int64 on the device: this step's ids padded to capacity, then their count


class SlotEvents:
    """When a slot of page-locked staging may be written again: per slot, an event recorded on the compute stream once
    the copies that read it are queued (on the CPU there is nothing to wait for). Step k writes slot k % 2 after step
    k-2's copies from it have run: the update-wait chain ensured it already (update k-2 waited on step k-2's copy-out,
    queued after them), implicitly; each write now waits on its own slot's event, normally long done."""

    def __init__(self, cuda: bool, slots: int = 2):
        self.events = [torch.cuda.Event() for _ in range(slots)] if cuda else None

    def writable(self, slot: int) -> None:
        """Block until the copies queued from `slot` have run."""
        if self.events is not None:
            self.events[slot].synchronize()

    def queued(self, slot: int) -> None:
        """The copies that read `slot` are queued on the current stream."""
        if self.events is not None:
            self.events[slot].record()


def _mark_touched(touched: Tensor, table: nn.Module, inputs: tuple) -> None:
    """Forward pre-hook of a sparse table: the rows it reads (on the device; a CUDA graph captures the kernel)."""
    touched.index_fill_(0, inputs[0].reshape(-1), True)


class GradientOutbox:
    """The flat device buffer a step's gradients, statistics and sparse rows are gathered into, and its copies."""

    def __init__(self, params: list[Tensor], tables: dict[int, nn.Module], capacities: dict[int, int],
                 device: torch.device, slots: int = 2):
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(f"a device worker's step gathers the gradients into one buffer and needs every "
                             f"trained parameter in one floating dtype, got {sorted(map(str, dtypes))}")
        self.params, self.device, self.cuda = params, device, device.type == "cuda"
        self.dtype = next(iter(dtypes))
        self.dense = [i for i in range(len(params)) if i not in tables]
        offset, self.dense_slices = 0, {}
        for i in self.dense:
            self.dense_slices[i] = slice(offset, offset + params[i].numel())
            offset += params[i].numel()
        self.sparse: list[SparseRows] = []
        for i, table in sorted(tables.items()):
            rows, dim = params[i].shape
            capacity = min(rows, capacities[i])
            touched = torch.zeros(rows, dtype=torch.bool, device=device)
            table.register_forward_pre_hook(functools.partial(_mark_touched, touched))
            self.sparse.append(SparseRows(i, table, capacity, slice(offset, offset + capacity * dim), slice(0, 0),
                                          touched, torch.zeros(capacity + 1, dtype=torch.int64, device=device)))
            offset += capacity * dim
        self.gradient_end = offset  # clipping scales [0, gradient_end)
        self.dense_end = self.sparse[0].rows.start if self.sparse else offset
        for entry in self.sparse:
            entry.mask = slice(offset, offset + entry.capacity)
            offset += entry.capacity
        self.stats = slice(offset, offset + STATS)
        self.outbox = torch.zeros(offset + STATS, dtype=self.dtype, device=device)  # (N,)
        self.host = [torch.zeros_like(self.outbox, device="cpu", pin_memory=self.cuda) for _ in range(slots)]
        self.host_ids = [[torch.zeros(e.capacity + 1, dtype=torch.int64, pin_memory=self.cuda) for _ in range(slots)]
                         for e in self.sparse]  # staging of each step's ids (page-locked: the copy is async)
        self.staging = [torch.empty_like(self.outbox) for _ in range(slots)] if self.cuda else None
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        self.copied = [torch.cuda.Event() for _ in range(slots)] if self.cuda else None
        self.dense_views = {i: self.outbox[self.dense_slices[i]].view(params[i].shape) for i in self.dense}

    # --- host side, before the step -------------------------------------------------------------------------------
    def step_ids(self, host_ids: Tensor | None, slot: int) -> list[Tensor]:
        """The rows each sparse table sends this step: host_ids (K,) sorted distinct integers of the host-side batch
        (gradients.batch_ids), cut to each table's rows; copied into the device's ids buffers (page-locked staging,
        asynchronous). Returns the ids per table (host, (n,)) for `read`."""
        chosen = []
        for entry, staging in zip(self.sparse, self.host_ids):
            rows = self.params[entry.index].shape[0]
            ids = host_ids[(host_ids >= 0) & (host_ids < rows)] if host_ids is not None else host_ids
            if ids is None or len(ids) > entry.capacity:
                held = 0 if ids is None else len(ids)
                raise RuntimeError(f"a device worker's step: a batch holds {held} distinct ids for a sparse table "
                                   f"whose capacity is {entry.capacity}")
            buffer = staging[slot]
            buffer[:len(ids)] = ids
            buffer[len(ids):entry.capacity] = ids[0] if len(ids) else 0  # repeats, masked out on the device
            buffer[entry.capacity] = len(ids)
            entry.ids.copy_(buffer, non_blocking=self.cuda)
            chosen.append(ids)
        return chosen

    # --- device side: inside the step (captured in a CUDA graph) ---------------------------------------------------
    def begin(self) -> None:
        """Before the forward: no sparse row read yet."""
        for entry in self.sparse:
            entry.touched.zero_()

    @torch.no_grad()
    def gather(self, loss: Tensor, clip_norm: float | None, check: bool) -> tuple[int, ...]:
        """After backward: the gradients, sparse rows, norm, clipping and statistics into the outbox, on the device
        (no host read). Returns the indices of the parameters that got a gradient (known on the host)."""
        grads = [p.grad for p in self.params]
        present = tuple(i for i, g in enumerate(grads) if g is not None)
        norms = []
        missing = torch.zeros((), dtype=torch.bool, device=self.device)
        for entry in self.sparse:
            grad, capacity = grads[entry.index], entry.capacity
            ids = entry.ids[:capacity]
            keep = entry.touched[ids] & (torch.arange(capacity, device=self.device) < entry.ids[capacity])
            padding = getattr(entry.table, "padding_idx", None)
            if padding is not None:
                keep &= ids != padding
            chosen = torch.zeros_like(entry.touched).index_fill_(0, ids, True)
            missing |= (entry.touched & ~chosen).any()
            rows = self.outbox[entry.rows].view(capacity, -1)
            if grad is None:
                rows.zero_()
                keep.zero_()
            else:
                torch.mul(grad.index_select(0, ids), keep[:, None].to(self.dtype), out=rows)
                norms.append(torch.linalg.vector_norm(rows))  # the coalesced sparse gradient's norm
            self.outbox[entry.mask].copy_(keep)
        dense = [i for i in self.dense if grads[i] is not None]
        if dense:
            torch._foreach_copy_([self.dense_views[i] for i in dense], [grads[i] for i in dense])
        stats = self.outbox[self.stats]
        if clip_norm is not None and present:
            norms.extend(torch._foreach_norm([grads[i] for i in dense]))
            total = torch.linalg.vector_norm(torch.stack(norms))  # gradients.global_norm's arithmetic
            wide = total.double()
            scale = torch.where(wide > clip_norm, clip_norm / (wide + 1e-6), torch.ones_like(wide))
            self.outbox[:self.gradient_end].mul_(scale.to(self.dtype))
            stats[0] = torch.isfinite(total)
        elif check and present:
            stats[0] = torch.isfinite(self.outbox[:self.gradient_end].sum())
        else:
            stats[0] = 1
        stats[1] = loss.detach()
        stats[2] = missing
        return present

    # --- after the step: the copy to the host and its reading ----------------------------------------------------
    def segments(self, counts: list[int]) -> list[slice]:
        """The parts of the outbox a step's copy-out moves, contiguous ones merged: the dense gradients, each sparse
        table's first counts[i] rows (its ids this step), the masks and the statistics."""
        parts = [slice(0, self.dense_end)]
        for entry, count in zip(self.sparse, counts):
            dim = self.params[entry.index].shape[1]
            parts.append(slice(entry.rows.start, entry.rows.start + count * dim))
        parts.append(slice(self.gradient_end, self.stats.stop))
        merged = [parts[0]]
        for part in parts[1:]:
            if part.start == merged[-1].stop:
                merged[-1] = slice(merged[-1].start, part.stop)
            elif part.stop > part.start:
                merged.append(part)
        return merged

    def send(self, slot: int, counts: list[int]) -> None:
        """Start copying this step's outbox to host slot `slot`: its `segments` for counts (the rows of each sparse
        table this step sends, step_ids'); on a GPU staged on the device, then on the copy stream, after the step's
        work (the caller's clock marks its end)."""
        parts = self.segments(counts)
        if not self.cuda:
            for part in parts:
                self.host[slot][part].copy_(self.outbox[part])
            return
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(self.copied[slot])  # the staging buffer's previous copy to the host has finished
        for part in parts:
            self.staging[slot][part].copy_(self.outbox[part])
        self.copy_stream.wait_stream(compute)
        with torch.cuda.stream(self.copy_stream):
            for part in parts:
                self.host[slot][part].copy_(self.staging[slot][part], non_blocking=True)
            self.copied[slot].record(self.copy_stream)

    def read(self, slot: int, present: tuple[int, ...], ids: list[Tensor]) -> tuple[bool, float, list[Tensor | None]]:
        """(finite, loss, one host gradient per parameter or None) of the step copied into `slot`; call once its copy
        has finished. Dense gradients are views of the slot; sparse ones new coalesced sparse tensors."""
        host = self.host[slot]
        finite, loss, missing = host[self.stats].tolist()
        if missing:
            raise RuntimeError("a device worker's step: the model read a row of a sparse embedding whose id is not "
                               "among its batch's integer tensors, so its gradient would be lost; make that table "
                               "dense (nn.Embedding(sparse=False)) or train on 'cpu' workers")
        grads: list[Tensor | None] = [None] * len(self.params)
        for i in present:
            if i in self.dense_slices:
                grads[i] = host[self.dense_slices[i]].view(self.params[i].shape)
        for entry, chosen in zip(self.sparse, ids):
            if entry.index not in present:
                continue
            n = len(chosen)
            keep = host[entry.mask][:n] > 0
            values = host[entry.rows].view(entry.capacity, -1)[:n][keep]
            grads[entry.index] = torch.sparse_coo_tensor(chosen[keep][None], values, self.params[entry.index].shape,
                                                         is_coalesced=True, check_invariants=False)
        return bool(finite), loss, grads
