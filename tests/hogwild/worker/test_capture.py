"""How a CUDA graph capture that fails is undone (hogwild/worker/capture.py), on the CPU against a model of torch's
CUDA graph and allocator bookkeeping (fake_cuda.py): after any failure the caller's stream is current again, no
capture is counted under way (so empty_cache works), the pool's use is given back exactly once, and the error says
what the capture met. The same model shows what torch.cuda.graph's own exit leaves behind (why capture.py does not
use it). Only a GPU shows that CUDA and torch's C++ behave as their source reads: the `cuda` tests of
test_step_graph.py and bench/gpu_step_check.py's forced failure."""
import pytest
import torch

from hogwild.worker.capture import CaptureFailed, CaptureStuck, capture_graph
from tests.hogwild.worker.fake_cuda import FakeCuda


@pytest.fixture
def cuda(monkeypatch):
    return FakeCuda.install(monkeypatch)


def test_a_capture_is_global_on_a_side_stream_and_hands_back_the_graph_and_the_result(cuda):
    pool = torch.cuda.graph_pool_handle()
    graph, result = capture_graph(lambda: cuda.current.name, pool)
    assert result.startswith("side") and cuda.current is cuda.default and cuda.modes == ["global"]
    assert graph.pool() == pool and cuda.uses[pool] == 1 and not cuda.underway  # the graph holds its pool


def test_a_capture_an_op_refuses_is_undone_in_order_and_leaves_the_process_healthy(cuda):
    pool = torch.cuda.graph_pool_handle()
    with pytest.raises(CaptureFailed, match=r"capture failed \(RuntimeError: CUDA error: operation not permitted "
                                            r"when stream is capturing\); the capture was undone"):
        capture_graph(cuda.refuse, pool)
    assert cuda.log == ["empty_cache", "begin allocating to the pool", "capture begun", "end capture failed",
                        "allocation to the pool ended", "pool released", "graph reset", "stream default current"]
    assert cuda.healthy()
    torch.cuda.empty_cache()  # what the worker does before its eager step
    graph, _ = capture_graph(lambda: None, pool)  # and a later capture into the same pool works
    assert cuda.uses[pool] == 1 and cuda.current is cuda.default


def python_error():
    raise ValueError("a Python error inside the capture")


@pytest.mark.parametrize("how", ["python error", "end capture", "instantiate", "begin capture"])
def test_every_way_a_capture_fails_is_undone(cuda, how):
    """A Python error leaves the capture valid (ended, then its graph reset releases the pool); the end of capture
    fails (an unsafe call in autograd's thread: the allocation is ended here); instantiation fails after the
    allocation ended (the reset releases); the begin fails after the allocation began."""
    cuda.fail_end = {"end capture": "capture", "instantiate": "instantiate"}.get(how)
    cuda.fail_begin = how == "begin capture"
    with pytest.raises(CaptureFailed) as raised:
        capture_graph(python_error if how == "python error" else lambda: None, torch.cuda.graph_pool_handle())
    assert cuda.healthy(), cuda.log
    assert "empty_cache" not in cuda.log[1:]
    assert isinstance(raised.value.__cause__, ValueError if how == "python error" else RuntimeError)


def test_a_capture_whose_stream_cannot_be_ended_is_not_taken_for_a_fallback(cuda):
    cuda.fail_end = "stream"
    with pytest.raises(CaptureStuck, match=r"--graphs off") as raised:
        capture_graph(lambda: None, torch.cuda.graph_pool_handle())
    assert not isinstance(raised.value, RuntimeError)  # the worker's fallback catches RuntimeError only
    assert cuda.current is cuda.default  # the stream is restored, though the process cannot go on


def test_torch_cuda_graph_leaves_a_refused_capture_under_way(cuda):
    """What the worker did before (issue 41): torch.cuda.graph's __exit__ raises from capture_end before it ends the
    allocation or leaves the capture stream, so the empty_cache after the fallback fails."""
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="previous error during capture"):
        with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
            cuda.refuse()
    assert cuda.current is not cuda.default and cuda.underway
    with pytest.raises(RuntimeError, match="captures_underway.empty"):
        torch.cuda.empty_cache()
