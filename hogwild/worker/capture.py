"""Capturing a callable into a CUDA graph, or, when the capture fails, leaving the process as healthy as before it and
saying why: the one capture of the graphed worker step (step_graph.py) and of the bench's graphed plain loop.

Why not `with torch.cuda.graph(...)`: its __exit__ calls capture_end() first. When the capture was invalidated (an op
that CUDA graphs refuse, in this thread or in autograd's), cudaStreamEndCapture fails and capture_end raises, and
__exit__ never leaves the capture stream; depending on torch's version the allocation to the graph's pool is left under
way too (the next torch.cuda.empty_cache() trips the allocator's assert `captures_underway.empty()`), and the pool's
use count is never given back (CUDAGraph::reset releases a pool only after a capture that ended).

What a failed capture_end leaves depends on torch (aten/src/ATen/cuda/CUDAGraph.cpp):
  - before pytorch PR #180395 ("fix: leak in CUDAGraph::capture_end"), the error of cudaStreamEndCapture is raised
    first: the allocation to the pool (on the device; on a torch with pinned-host graph pools, on the host too) is
    still under way;
  - from it on (torch 2.13's headers carry what the fixed capture_end uses), both allocations are ended, then the
    error is raised;
  - reset() releases the pool's use only for a capture that ended; a later torch (PR #190308) releases it whenever
    the capture began.
So `capture_graph` undoes a failure by what the capture did, not by one order: the pool is a torch.cuda.MemPool whose
use count is read before capture_begin, and after the undo every use the failed capture still holds is given back.
The undo, on the capture stream:
  1. a capture still under way on the stream (an error in Python left it valid, or the error invalidated it) is ended
     by capture_end (which fails for an invalidated one, and still ends it);
  2. the graph is reset (it forgets its generator capture state and its place among the capturing graphs; a capture
     that ended, or on a torch with #190308 any capture that began, gives the pool back there);
  3. the device allocation to the pool, if still under way (torch before #180395), is ended (torch's own pool users
     end one with _cuda_endAllocateToPool, then _cuda_releasePool: torch.cuda.use_mem_pool, inductor's
     cudagraph_trees);
  4. the pool's uses above its count before capture_begin are released;
  5. the caller's stream is restored (the stream context's exit, however the block ends).
Then CaptureFailed is raised, naming the error: the caller may go on without graphs (empty_cache included). Where the
stream still captures after step 1 (capture_end refused to end it), nothing in torch can end it: CaptureStuck, which
is not a RuntimeError, so that no fallback catches it; the process must end.

Only capture errors are undone. A sticky CUDA error (an illegal address, a device-side assert, a launch failure: every
later CUDA call fails with it) comes from kernels that ran - the warm-up's, before the capture (it surfaces at the
synchronize before capture_begin), or earlier ones first reported inside it - and no undo can run: it is raised as
itself, never as CaptureFailed, so that the caller ends with its text (an empty_cache after it would hide it behind
the allocator's assert).

What no Python call can undo: on a torch before #180395 that has pinned-host graph pools, the host allocator's
registration of the failed capture (there is no binding that ends it). Later pin_memory calls take its locked path, and
a capture into the same pool would be refused ("already recording"); a worker never captures again after a failure
(its eager step captures nothing), and a new step takes a new pool.

What only a GPU shows: that CUDA and torch's C++ behave as torch's source reads (tests/hogwild/worker/test_capture.py
drives this sequence against a model of CUDAGraph.cpp's orders and the allocators' bookkeeping, fake_cuda.py).

Serves step 3 of `hogwild.train` (spawn), inside the worker processes; bench/plain_loop.py imports it too.

Usage: `graph, result = capture_graph(lambda: step(static), pool)` with `pool = torch.cuda.MemPool()`;
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

# cudaError_t codes after which the process's CUDA context is unusable (every later call returns the error): ECC
# uncorrectable 214, illegal address 700, launch timeout 702, device-side assert 710, hardware stack 714, illegal
# instruction 715, misaligned address 716, invalid address space 717, invalid pc 718, launch failure 719, unknown 999
STICKY_CUDA_ERRORS = frozenset({214, 700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
STICKY_MESSAGES = ("uncorrectable ECC error", "illegal memory access", "launch timed out", "device-side assert",
                   "hardware stack error", "illegal instruction", "misaligned address",
                   "not supported on global/shared address space", "invalid program counter",
                   "unspecified launch failure")  # CUDA's texts of the same, for an error that carries no code

_capture_streams: dict[int, Any] = {}  # device index -> the stream every capture on it uses


class CaptureFailed(RuntimeError):
    """A capture failed and was undone: no capture is under way, the pool's uses given back, the caller's stream
    current again. The step can run eagerly."""


class CaptureStuck(Exception):
    """A capture failed and its stream still captures: the process cannot use CUDA normally any more."""


def describe(error: BaseException) -> str:
    """'Type: first line' of an error, for a one-line message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def is_sticky(error: BaseException) -> bool:
    """Whether `error` is a sticky CUDA error (STICKY_CUDA_ERRORS): by torch.AcceleratorError's error_code, else
    by CUDA's text."""
    code = getattr(error, "error_code", None)
    if isinstance(code, int):
        return code in STICKY_CUDA_ERRORS
    text = str(error)
    return isinstance(error, RuntimeError) and "CUDA error" in text and any(m in text for m in STICKY_MESSAGES)


def _capture_stream(index: int) -> Any:
    """One capture stream per device: graphs sharing a pool should be captured on the same stream, whose freed
    blocks the pool can reuse (torch.cuda.graph's note on pools)."""
    if index not in _capture_streams:
        _capture_streams[index] = torch.cuda.Stream(index)
    return _capture_streams[index]


def capture_graph(body: Callable[[], T], pool: Any) -> tuple[Any, T]:
    """Capture body() on the current device into a new torch.cuda.CUDAGraph that allocates from `pool` (a
    torch.cuda.MemPool: its use count says what a failed capture left). Returns (graph, body's result).
    Raises CaptureFailed after undoing a failed capture (module docstring), CaptureStuck where it cannot be undone,
    and a sticky CUDA error as itself."""
    index = torch.cuda.current_device()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()  # a sticky error of the warm-up's kernels surfaces here, and is raised as itself
    torch.cuda.empty_cache()  # as torch.cuda.graph does: the pool gets what the warm-up left cached (none under way)
    uses = pool.use_count()  # what the pool must be left with if this capture fails
    with torch.cuda.stream(_capture_stream(index)):  # the caller's stream comes back however the block ends
        try:
            graph.capture_begin(pool=pool.id, capture_error_mode=CAPTURE_ERROR_MODE)
            result = body()
            graph.capture_end()
        except Exception as error:
            if is_sticky(error):
                raise  # CUDA is unusable: nothing can be undone, the caller ends with this error
            _undo(graph, pool, index, uses, error)  # a sticky error first met here is raised as itself too
            raise CaptureFailed(f"CUDA graph capture failed ({describe(error)}); the capture was undone") from error
    return graph, result


def _undo(graph: Any, pool: Any, index: int, uses: int, error: Exception) -> None:
    """Steps 1-4 of the module docstring, on the capture stream (still current)."""
    if torch.cuda.is_current_stream_capturing():  # active, or invalidated and not yet ended
        try:
            graph.capture_end()
        except RuntimeError as end_error:
            if is_sticky(end_error):
                raise
            # invalidated: cudaStreamEndCapture ended it all the same
    if torch.cuda.is_current_stream_capturing():
        raise CaptureStuck(f"CUDA graph capture failed ({describe(error)}) and its stream could not be taken out of "
                           f"capture; this process cannot go on. Train with graphs='off' (run.py --graphs off)")
    graph.reset()
    try:
        torch._C._cuda_endAllocateToPool(index, pool.id)
    except RuntimeError:
        pass  # not under way: capture_end (or reset) ended it, or capture_begin failed before it began
    for _ in range(pool.use_count() - uses):
        torch._C._cuda_releasePool(index, pool.id)
