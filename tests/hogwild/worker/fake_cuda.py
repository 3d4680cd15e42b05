"""A model of what a CUDA graph capture does to a process, for CPU tests of how a failed capture is undone
(hogwild/worker/capture.py): torch.cuda's streams, CUDAGraph and the caching allocator's capture bookkeeping,
written from torch's source (aten/src/ATen/cuda/CUDAGraph.cpp, c10/cuda/CUDACachingAllocator.cpp):
  - capture_begin refuses the default stream, then begins the allocation to the pool (the pool's use count + 1, a
    capture counted under way), then begins capturing the stream (which may fail: `fail_begin`);
  - an op CUDA graphs refuse (`refuse()`) invalidates the capture and raises, as CUDA does;
  - capture_end refuses another stream than the capture's; cudaStreamEndCapture ends the capture and fails for an
    invalidated one (or with `fail_end`) before the allocation to the pool is ended; a capture that ended can be
    given a pool id (`pool()`) and released by `reset()`, one that failed cannot;
  - _cuda_endAllocateToPool fails for a pool not under way; empty_cache asserts that no capture is under way
    (`synchronize_and_free_events`' TORCH_INTERNAL_ASSERT(captures_underway.empty())).
Everything that happens is appended to `log`.

Usage: `cuda = FakeCuda.install(monkeypatch)`; run code that captures; assert on `cuda.underway`, `cuda.uses`,
`cuda.current`, `cuda.log`.
"""
from __future__ import annotations

import itertools

import torch


class FakeStream:
    def __init__(self, name: str):
        self.name, self.status = name, "none"  # none | active | invalidated

    def wait_stream(self, other: "FakeStream") -> None:
        pass

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


class FakeGraph:
    def __init__(self, cuda: "FakeCuda"):
        self.cuda, self.stream, self.pool_id, self.ended = cuda, None, None, False

    def capture_begin(self, pool=None, capture_error_mode="global", check_input_liveness=False) -> None:
        cuda = self.cuda
        if cuda.current is cuda.default:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        self.stream, self.pool_id = cuda.current, pool if pool is not None else (next(cuda.ids), 0)
        cuda.modes.append(capture_error_mode)
        cuda.underway.append(self.pool_id)
        cuda.uses[self.pool_id] = cuda.uses.get(self.pool_id, 0) + 1
        cuda.log.append("begin allocating to the pool")
        if cuda.fail_begin:
            raise RuntimeError("CUDA error: cudaStreamBeginCapture failed")
        self.stream.status = "active"
        cuda.log.append("capture begun")

    def capture_end(self) -> None:
        cuda = self.cuda
        if cuda.current is not self.stream or cuda.fail_end == "stream":
            raise RuntimeError("Capture must end on the same stream it began on.")
        invalid = self.stream.status == "invalidated" or cuda.fail_end == "capture"
        self.stream.status = "none"  # cudaStreamEndCapture ends even an invalidated capture
        if invalid:
            cuda.log.append("end capture failed")
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        cuda.underway.remove(self.pool_id)
        cuda.log.append("allocation to the pool ended")
        if cuda.fail_end == "instantiate":
            self.ended = True
            raise RuntimeError("CUDA error: out of memory (cudaGraphInstantiate)")
        self.ended = True
        cuda.log.append("capture ended")

    def pool(self):
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self.pool_id

    def reset(self) -> None:
        if self.ended:
            self.cuda.release(self.pool_id)
            self.ended = False
        self.cuda.log.append("graph reset")

    def replay(self) -> None:
        self.cuda.log.append("replay")

    def __del__(self) -> None:  # ~CUDAGraph calls reset()
        if self.ended:
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
    def __init__(self):
        self.default = FakeStream("default")
        self.current = self.default
        self.underway: list = []  # pools a capture allocates to (captures_underway)
        self.uses: dict = {}  # pool -> use count
        self.log: list[str] = []
        self.modes: list[str] = []  # capture_error_mode of each capture_begin
        self.ids = itertools.count(1)
        self.fail_begin, self.fail_end = False, None  # None | "capture" | "stream" | "instantiate"
        self.streams = itertools.count()

    @classmethod
    def install(cls, monkeypatch) -> "FakeCuda":
        cuda = cls()
        for name, value in [("CUDAGraph", lambda *a, **k: FakeGraph(cuda)), ("Stream", cuda.new_stream),
                            ("stream", cuda.stream), ("current_stream", lambda device=None: cuda.current),
                            ("current_device", lambda: 0), ("synchronize", lambda device=None: None),
                            ("empty_cache", cuda.empty_cache), ("graph_pool_handle", cuda.pool_handle),
                            ("is_current_stream_capturing", lambda: cuda.current.status != "none")]:
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", cuda.end_allocate, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda device, pool: cuda.release(pool), raising=False)
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
        monkeypatch.setattr(torch.cuda.graph, "default_capture_stream", None)
        monkeypatch.setattr("hogwild.worker.capture._capture_streams", {})
        return cuda

    def new_stream(self, device=None, **kwargs) -> FakeStream:
        return FakeStream(f"side {next(self.streams)}")

    def stream(self, stream: FakeStream) -> "StreamContext":
        return StreamContext(self, stream)

    def pool_handle(self):
        return (0, next(self.ids))

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
        if self.underway:
            raise RuntimeError("INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp: captures_underway.empty()")

    def refuse(self) -> None:
        """An op CUDA graphs refuse, met while capturing: the capture is invalidated and the op raises."""
        if self.current.status == "active":
            self.current.status = "invalidated"
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    def healthy(self) -> bool:
        """No capture under way or stream capturing, every pool's uses given back, the default stream current."""
        return (not self.underway and self.current is self.default and not any(self.uses.values())
                and self.current.status == "none")
