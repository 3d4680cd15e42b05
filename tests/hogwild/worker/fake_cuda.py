"""A model of what a CUDA graph capture does to a process, for CPU tests of how a failed capture is undone
(hogwild/worker/capture.py): torch.cuda's streams, MemPool, CUDAGraph, the caching allocator's and the pinned-host
allocator's capture bookkeeping, and sticky errors, written from torch's source (aten/src/ATen/cuda/CUDAGraph.cpp
before and after pytorch PR #180395 and with PR #190308, c10/cuda/CUDACachingAllocator.cpp, and 2.13's
ATen/core/CachingHostAllocator.h):
  - a MemPool holds one use of its pool from its creation until it is collected;
  - capture_begin refuses the default stream, then begins the device allocation to the pool (its use count + 1, a
    capture under way; refused for a pool already under way), then the host allocator's (the host pool's count + 1,
    counted first, then refused for a pool already under way: "already recording"), then begins capturing the
    stream (which may fail: `fail_begin`);
  - an op CUDA graphs refuse (`refuse()`) invalidates the capture and raises, as CUDA does;
  - capture_end refuses another stream than the capture's; cudaStreamEndCapture ends the capture and fails for an
    invalidated one (or with `fail_end`). `order` says what comes first:
      "before" (torch before #180395): the failure is raised, both allocations to the pool still under way;
      "after" (torch 2.13): both allocations are ended, then the failure is raised;
      "reset" (#180395 and #190308): as "after", and reset() gives the pool back for any capture that began;
    a capture that ended can be given a pool id (`pool()`) and releases it in `reset()`; one that failed cannot;
  - _cuda_endAllocateToPool fails for a pool not under way; empty_cache asserts that no capture is under way
    (`synchronize_and_free_events`' TORCH_INTERNAL_ASSERT(captures_underway.empty()));
  - a sticky error (`sticky(code)`, e.g. 700: an illegal address from a kernel that ran) makes every later CUDA call
    raise it, as torch.AcceleratorError with its error_code.
Everything that happens is appended to `log`.

Usage: `cuda = FakeCuda.install(monkeypatch, order="after")`; run code that captures; assert on `cuda.underway`,
`cuda.uses`, `cuda.host_underway`, `cuda.current`, `cuda.log`.
"""
from __future__ import annotations

import itertools

import torch

ORDERS = ("before", "after", "reset")
STICKY_TEXT = {700: "an illegal memory access was encountered", 710: "device-side assert triggered"}


class FakeStream:
    def __init__(self, name: str):
        self.name, self.status = name, "none"  # none | active | invalidated

    def wait_stream(self, other: "FakeStream") -> None:
        pass

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


class FakeMemPool:
    """torch.cuda.MemPool: a pool id and one use of it, given back when the object is collected."""

    def __init__(self, cuda: "FakeCuda"):
        self.cuda, self.id = cuda, (0, next(cuda.ids))
        cuda.uses[self.id] = 1

    def use_count(self) -> int:
        return self.cuda.uses[self.id]

    def __del__(self) -> None:
        self.cuda.release(self.id)


class FakeGraph:
    def __init__(self, cuda: "FakeCuda"):
        self.cuda, self.stream, self.pool_id = cuda, None, None
        self.ended = False  # capture_ended_
        self.began = False  # allocated_pool_ (#190308): the pool was acquired
        self.recording = False  # capturing_to_pool_: the allocations to the pool are under way

    def capture_begin(self, pool=None, capture_error_mode="global", check_input_liveness=False) -> None:
        cuda = self.cuda
        cuda.check()
        if cuda.current is cuda.default:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        self.stream, self.pool_id = cuda.current, pool if pool is not None else (next(cuda.ids), 0)
        cuda.modes.append(capture_error_mode)
        if self.pool_id in cuda.underway:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        cuda.underway.append(self.pool_id)
        cuda.uses[self.pool_id] = cuda.uses.get(self.pool_id, 0) + 1
        cuda.log.append("begin allocating to the pool")
        cuda.host_uses[self.pool_id] = cuda.host_uses.get(self.pool_id, 0) + 1
        if self.pool_id in cuda.host_underway:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        cuda.host_underway.append(self.pool_id)
        self.began = self.recording = True
        if cuda.fail_begin:
            raise RuntimeError("CUDA error: cudaStreamBeginCapture failed")
        self.stream.status = "active"
        cuda.log.append("capture begun")

    def _end_allocations(self) -> None:
        self.cuda.underway.remove(self.pool_id)
        self.cuda.host_underway.remove(self.pool_id)
        self.recording = False
        self.cuda.log.append("allocation to the pool ended")

    def capture_end(self) -> None:
        cuda = self.cuda
        cuda.check()
        if cuda.current is not self.stream or cuda.fail_end == "stream":
            raise RuntimeError("Capture must end on the same stream it began on.")
        invalid = self.stream.status == "invalidated" or cuda.fail_end == "capture"
        self.stream.status = "none"  # cudaStreamEndCapture ends even an invalidated capture
        if cuda.order != "before":
            self._end_allocations()
        if invalid:
            cuda.log.append("end capture failed")
            raise cuda.error(901, "operation failed due to a previous error during capture")
        if cuda.order == "before":
            self._end_allocations()
        self.ended = True
        if cuda.fail_end == "instantiate":
            raise cuda.error(2, "out of memory (cudaGraphInstantiate)")
        cuda.log.append("capture ended")

    def pool(self):
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self.pool_id

    def reset(self) -> None:
        cuda = self.cuda
        if cuda.order == "reset" and self.began:
            if self.recording:
                self._end_allocations()
            self.ended = True
        if self.ended:
            cuda.release(self.pool_id)
            cuda.host_uses[self.pool_id] -= 1
            self.ended = self.began = False
        cuda.log.append("graph reset")

    def replay(self) -> None:
        self.cuda.check()
        self.cuda.log.append("replay")

    def __del__(self) -> None:  # ~CUDAGraph calls reset()
        if self.ended or (self.cuda.order == "reset" and self.began):
            self.reset()


class StreamContext:
    """torch.cuda.StreamContext: the stream current on enter, the previous one again on exit (only on exit)."""

    def __init__(self, cuda: "FakeCuda", stream: FakeStream):
        self.cuda, self.stream, self.previous = cuda, stream, None

    def __enter__(self) -> None:
        self.previous, self.cuda.current = self.cuda.current, self.stream

    def __exit__(self, *exc) -> None:
        self.cuda.current = self.previous
        self.cuda.log.append(f"stream {self.previous.name} current")


class FakeCuda:
    def __init__(self, order: str = "after"):
        assert order in ORDERS, order
        self.order = order
        self.default = FakeStream("default")
        self.current = self.default
        self.underway: list = []  # pools a capture allocates to on the device (captures_underway)
        self.host_underway: list = []  # ... on the pinned host (the host allocator's captures_underway)
        self.uses: dict = {}  # device pool -> use count
        self.host_uses: dict = {}  # host pool -> use count
        self.log: list[str] = []
        self.modes: list[str] = []  # capture_error_mode of each capture_begin
        self.ids = itertools.count(1)
        self.fail_begin, self.fail_end = False, None  # None | "capture" | "stream" | "instantiate"
        self.failure: Exception | None = None  # a sticky error: every CUDA call raises it
        self.streams = itertools.count()

    @classmethod
    def install(cls, monkeypatch, order: str = "after") -> "FakeCuda":
        cuda = cls(order)
        for name, value in [("CUDAGraph", lambda *a, **k: FakeGraph(cuda)), ("Stream", cuda.new_stream),
                            ("stream", cuda.stream), ("current_stream", lambda device=None: cuda.current),
                            ("current_device", lambda: 0), ("synchronize", cuda.synchronize),
                            ("empty_cache", cuda.empty_cache), ("MemPool", lambda *a, **k: FakeMemPool(cuda)),
                            ("is_current_stream_capturing", cuda.capturing)]:
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", cuda.end_allocate, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda device, pool: cuda.release(pool), raising=False)
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
        monkeypatch.setattr(torch.cuda.graph, "default_capture_stream", None)
        monkeypatch.setattr("hogwild.worker.capture._capture_streams", {})
        return cuda

    @staticmethod
    def error(code: int, text: str) -> Exception:
        """The error torch raises for a failed CUDA call: torch.AcceleratorError carrying cudaError_t `code`."""
        error = torch.AcceleratorError(f"CUDA error: {text}")
        error.error_code = code
        return error

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def sticky(self, code: int = 700) -> None:
        """A kernel that ran hit a sticky error: raised now and by every later CUDA call."""
        self.failure = self.error(code, STICKY_TEXT[code])
        self.log.append(f"sticky error {code}")
        raise self.failure

    def new_stream(self, device=None, **kwargs) -> FakeStream:
        return FakeStream(f"side {next(self.streams)}")

    def stream(self, stream: FakeStream) -> "StreamContext":
        return StreamContext(self, stream)

    def synchronize(self, device=None) -> None:
        self.check()

    def capturing(self) -> bool:
        self.check()
        return self.current.status != "none"

    def end_allocate(self, device: int, pool) -> None:
        if pool not in self.underway:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        self.underway.remove(pool)
        self.log.append("allocation to the pool ended")

    def release(self, pool) -> None:
        assert self.uses.get(pool, 0) > 0, f"pool {pool} released more often than used"
        self.uses[pool] -= 1
        self.log.append("pool released")

    def empty_cache(self) -> None:
        self.log.append("empty_cache")
        self.check()
        if self.underway:
            raise RuntimeError("INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp: captures_underway.empty()")

    def refuse(self) -> None:
        """An op CUDA graphs refuse, met while capturing: the capture is invalidated and the op raises."""
        if self.current.status == "active":
            self.current.status = "invalidated"
        raise self.error(900, "operation not permitted when stream is capturing")

    def healthy(self, pools: dict | None = None) -> bool:
        """No device capture under way or stream capturing, the default stream current, and every pool's uses those
        `pools` names (pool id -> uses still held: a live MemPool's own, live graphs'), none for the others."""
        pools = pools or {}
        return (not self.underway and self.current is self.default and self.current.status == "none"
                and all(uses == pools.get(pool, 0) for pool, uses in self.uses.items()))
