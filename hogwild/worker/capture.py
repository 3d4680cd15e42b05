"""Capturing a callable into a CUDA graph, or, when the capture fails, leaving the process as healthy as before it and
saying why: the one capture of the graphed worker step (step_graph.py) and of the bench's graphed plain loop.

Why not `with torch.cuda.graph(...)`: its __exit__ calls capture_end() first. When the capture was invalidated (an op
that CUDA graphs refuse, in this thread or in autograd's), cudaStreamEndCapture fails and capture_end raises before
it ends the caching allocator's allocation to the graph's pool, and __exit__ then never leaves the capture stream.
The thread goes on on the capture stream, the allocator still counts a capture under way (the next
torch.cuda.empty_cache() trips its assert `captures_underway.empty()`), and the pool's use count is never given back
(CUDAGraph::reset releases a pool only after a capture that ended). torch's own pool users end an allocation to a pool
with _cuda_endAllocateToPool then _cuda_releasePool in a `finally` (torch.cuda.use_mem_pool, inductor's
cudagraph_trees); `capture_graph` does the same for a failed capture:
  1. a capture still under way on the stream (an error in Python left it valid, or the error invalidated it) is
     ended by capture_end (which fails for an invalidated one, and still ends it);
  2. the allocation to the pool, if still under way, is ended and this capture's use of the pool released;
     if capture_end had already ended it (it failed later, instantiating), the graph's reset releases the pool;
  3. the graph is reset (it forgets its generator capture state and its place among the capturing graphs);
  4. the caller's stream is restored (the stream context's exit, however the block ends).
Then CaptureFailed is raised, naming the error: the caller may go on without graphs (empty_cache included). Where the
stream still captures after step 1 (capture_end refused to end it), nothing in torch can end it: CaptureStuck, which
is not a RuntimeError, so that no fallback catches it; the process must end.

What only a GPU shows: that CUDA and torch's C++ behave as torch's source reads (tests/hogwild/worker/test_capture.py
drives this sequence against a model of CUDAGraph.cpp and the allocator's bookkeeping).

Serves step 3 of `hogwild.train` (spawn), inside the worker processes; bench/plain_loop.py imports it too.

Usage: `graph, result = capture_graph(lambda: step(static), pool)` with `pool = torch.cuda.graph_pool_handle()`;
`except CaptureFailed as error:` run the step eagerly instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

# "global": while this thread captures, unsafe CUDA calls from any thread fail the capture. The backward pass inside
# a captured step runs on autograd's device thread, which "thread_local" would leave unchecked (an unsafe call there
# would go unnoticed). It is safe here because no other thread uses CUDA during a capture: the worker captures at
# start-up, before its update thread exists, and the plain loop has no other thread.
CAPTURE_ERROR_MODE = "global"

_capture_streams: dict[int, Any] = {}  # device index -> the stream every capture on it uses


class CaptureFailed(RuntimeError):
    """A capture failed and was undone: no capture is under way, the pool's use given back, the caller's stream
    current again. The step can run eagerly."""


class CaptureStuck(Exception):
    """A capture failed and its stream still captures: the process cannot use CUDA normally any more."""


def describe(error: BaseException) -> str:
    """'Type: first line' of an error, for a one-line message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _capture_stream(index: int) -> Any:
    """One capture stream per device: graphs sharing a pool should be captured on the same stream, whose freed
    blocks the pool can reuse (torch.cuda.graph's note on pools)."""
    if index not in _capture_streams:
        _capture_streams[index] = torch.cuda.Stream(index)
    return _capture_streams[index]


def capture_graph(body: Callable[[], T], pool: Any) -> tuple[Any, T]:
    """Capture body() on the current device into a new torch.cuda.CUDAGraph that allocates from `pool` (a
    torch.cuda.graph_pool_handle(): a failed capture must know its pool's id). Returns (graph, body's result).
    Raises CaptureFailed after undoing a failed capture (module docstring), CaptureStuck where it cannot be undone."""
    index = torch.cuda.current_device()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # as torch.cuda.graph does: the pool gets what the warm-up left cached (none under way)
    with torch.cuda.stream(_capture_stream(index)):  # the caller's stream comes back however the block ends
        try:
            graph.capture_begin(pool=pool, capture_error_mode=CAPTURE_ERROR_MODE)
            result = body()
            graph.capture_end()
        except Exception as error:
            _undo(graph, pool, index, error)
            raise CaptureFailed(f"CUDA graph capture failed ({describe(error)}); the capture was undone") from error
    return graph, result


def _undo(graph: Any, pool: Any, index: int, error: Exception) -> None:
    """Steps 1-3 of the module docstring, on the capture stream (still current)."""
    if torch.cuda.is_current_stream_capturing():  # active, or invalidated and not yet ended
        try:
            graph.capture_end()
        except RuntimeError:
            pass  # invalidated: cudaStreamEndCapture ended it all the same
    if torch.cuda.is_current_stream_capturing():
        raise CaptureStuck(f"CUDA graph capture failed ({describe(error)}) and its stream could not be taken out of "
                           f"capture; this process cannot go on. Train with graphs='off' (run.py --graphs off)")
    try:
        torch._C._cuda_endAllocateToPool(index, pool)
    except RuntimeError:
        pass  # not under way: capture_end had ended it, or capture_begin failed before it began
    else:
        torch._C._cuda_releasePool(index, pool)  # reset() releases only a capture that ended
    graph.reset()
