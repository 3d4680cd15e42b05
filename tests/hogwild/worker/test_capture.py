"""How a CUDA graph capture that fails is undone (hogwild/worker/capture.py), on the CPU against a model of torch's
CUDA graph and allocator bookkeeping (fake_cuda.py) under each order of torch's capture_end (before pytorch PR
#180395, after it, and with PR #190308's reset): after any failure the caller's stream is current again, no capture is
counted under way (so empty_cache works), the pool holds exactly the uses it held before (none leaked, none given back
twice), and the error says what the capture met; a sticky CUDA error is raised as itself, never as a failed capture.
The same model shows what torch.cuda.graph's own exit leaves behind (why capture.py does not use it). Only a GPU shows
that CUDA and torch's C++ behave as their source reads: the `cuda` tests of test_step_graph.py and
bench/gpu_step_check.py's forced failure (with torch.cuda.memory_reserved before and after it)."""
import pytest
import torch

from hogwild.worker.capture import CaptureFailed, CaptureStuck, capture_graph, is_sticky
from tests.hogwild.worker.fake_cuda import ORDERS, FakeCuda

ORDER = pytest.mark.parametrize("order", ORDERS)


@pytest.fixture
def cuda(monkeypatch):
    return FakeCuda.install(monkeypatch)


def install(monkeypatch, order):
    return FakeCuda.install(monkeypatch, order)


@ORDER
def test_a_capture_is_global_on_a_side_stream_and_hands_back_the_graph_and_the_result(monkeypatch, order):
    cuda = install(monkeypatch, order)
    pool = torch.cuda.MemPool()
    graph, result = capture_graph(lambda: cuda.current.name, pool)
    assert result.startswith("side") and cuda.current is cuda.default and cuda.modes == ["global"]
    assert graph.pool() == pool.id and pool.use_count() == 2  # the pool's own use, and the graph's
    assert not cuda.underway and not cuda.host_underway
    del graph
    assert pool.use_count() == 1


@ORDER
def test_a_refused_capture_gives_back_exactly_the_use_it_took_and_leaves_the_process_healthy(monkeypatch, order):
    """The leak of torch with #180395 (capture_end ends the allocation, reset releases nothing: the pool's use stays
    taken) and the double release of torch with #190308 (reset already gave it back) are both counted here."""
    cuda = install(monkeypatch, order)
    pool = torch.cuda.MemPool()
    kept, _ = capture_graph(lambda: None, pool)  # a graph captured before, as the step's shapes share one pool
    with pytest.raises(CaptureFailed, match=r"capture failed \(AcceleratorError: CUDA error: operation not permitted "
                                            r"when stream is capturing\); the capture was undone"):
        capture_graph(cuda.refuse, pool)
    assert pool.use_count() == 2 and cuda.healthy({pool.id: 2}), cuda.log  # the pool's own and the kept graph's
    failed = cuda.log[cuda.log.index("capture ended") + 2:]
    ended_by_torch = order != "before"
    assert failed == ["empty_cache", "begin allocating to the pool", "capture begun",
                      *(["allocation to the pool ended"] if ended_by_torch else []), "end capture failed",
                      *(["pool released", "graph reset"] if order == "reset" else ["graph reset"]),
                      *([] if ended_by_torch else ["allocation to the pool ended"]),
                      *([] if order == "reset" else ["pool released"]), "stream default current"]
    torch.cuda.empty_cache()  # what the worker does before its eager step
    del kept
    assert pool.use_count() == 1


@ORDER
@pytest.mark.parametrize("how", ["python error", "end capture", "instantiate", "begin capture"])
def test_every_way_a_capture_fails_is_undone(monkeypatch, order, how):
    """A Python error leaves the capture valid (ended, then its graph reset releases the pool); the end of capture
    fails (an unsafe call in autograd's thread); instantiation fails after the allocation ended (the reset releases);
    the begin fails after the allocation began."""
    cuda = install(monkeypatch, order)
    cuda.fail_end = {"end capture": "capture", "instantiate": "instantiate"}.get(how)
    cuda.fail_begin = how == "begin capture"
    pool = torch.cuda.MemPool()
    with pytest.raises(CaptureFailed) as raised:
        capture_graph(python_error if how == "python error" else lambda: None, pool)
    assert cuda.healthy({pool.id: 1}), cuda.log
    assert "empty_cache" not in cuda.log[1:]
    assert isinstance(raised.value.__cause__, ValueError if how == "python error" else RuntimeError)


def python_error():
    raise ValueError("a Python error inside the capture")


def test_before_180395_the_host_registration_stays_and_a_new_pool_captures(monkeypatch):
    """What no Python call can end on torch before #180395 with pinned-host graph pools: the host allocator's
    registration of the failed capture. The device side is healthy; a capture into the same pool is refused, so
    whoever captures again takes a new pool (the worker captures nothing after a failure; the plain loop's next run
    makes a new pool)."""
    cuda = install(monkeypatch, "before")
    pool = torch.cuda.MemPool()
    with pytest.raises(CaptureFailed):
        capture_graph(cuda.refuse, pool)
    assert cuda.healthy({pool.id: 1}) and cuda.host_underway == [pool.id]
    with pytest.raises(CaptureFailed, match="already recording"):
        capture_graph(lambda: None, pool)
    fresh = torch.cuda.MemPool()
    graph, _ = capture_graph(lambda: None, fresh)
    assert fresh.use_count() == 2 and cuda.healthy({pool.id: 1, fresh.id: 2}), cuda.log


@ORDER
@pytest.mark.parametrize("where", ["synchronize", "body", "undo"])
def test_a_sticky_error_is_raised_as_itself_wherever_it_first_shows(monkeypatch, order, where):
    """A sticky error of a kernel that ran (the warm-up's): at the synchronize before the capture, inside the body,
    or first inside the undo (the body failed for another reason). Never CaptureFailed: nothing is undone and nobody
    calls empty_cache, whose assert would hide it."""
    cuda = install(monkeypatch, order)

    def python_error_then_sticky():
        cuda.failure = cuda.error(700, "an illegal memory access was encountered")  # every call reports it now
        raise ValueError("a Python error inside the capture")

    if where == "synchronize":
        cuda.failure = cuda.error(700, "an illegal memory access was encountered")
    body = {"synchronize": lambda: None, "body": cuda.sticky, "undo": python_error_then_sticky}[where]
    with pytest.raises(torch.AcceleratorError, match="illegal memory access") as raised:
        capture_graph(body, torch.cuda.MemPool())
    assert not isinstance(raised.value, CaptureFailed)
    assert "empty_cache" not in cuda.log[1:] and "graph reset" not in cuda.log
    if where == "undo":
        assert isinstance(raised.value.__context__, ValueError)  # the body's error stays in the traceback


def test_sticky_errors_are_told_from_capture_errors_by_code_or_text():
    assert is_sticky(FakeCuda.error(700, "an illegal memory access was encountered"))
    assert not is_sticky(FakeCuda.error(900, "operation not permitted when stream is capturing"))
    assert not is_sticky(FakeCuda.error(2, "out of memory"))
    assert is_sticky(RuntimeError("CUDA error: device-side assert triggered"))  # a torch that gives no code
    assert not is_sticky(RuntimeError("an illegal memory access, said a Python check"))


def test_a_capture_whose_stream_cannot_be_ended_is_not_taken_for_a_fallback(cuda):
    cuda.fail_end = "stream"
    with pytest.raises(CaptureStuck, match=r"--graphs off") as raised:
        capture_graph(lambda: None, torch.cuda.MemPool())
    assert not isinstance(raised.value, RuntimeError)  # the worker's fallback catches CaptureFailed only
    assert cuda.current is cuda.default  # the stream is restored, though the process cannot go on


def test_torch_cuda_graph_leaves_a_refused_capture_under_way(monkeypatch):
    """What the worker did before (issue 41), on torch before #180395: torch.cuda.graph's __exit__ raises from
    capture_end before it ends the allocation or leaves the capture stream, so the empty_cache after the fallback
    fails."""
    cuda = install(monkeypatch, "before")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="previous error during capture"):
        with torch.cuda.graph(graph, pool=torch.cuda.MemPool().id):
            cuda.refuse()
    assert cuda.current is not cuda.default and cuda.underway
    with pytest.raises(RuntimeError, match="captures_underway.empty"):
        torch.cuda.empty_cache()
