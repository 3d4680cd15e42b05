"""What a graphed worker does when its step cannot be captured (hogwild/worker/worker.py's make_step), on the CPU: a
'cpu-replica' worker stands for a GPU one, its step captured against fake_cuda.py's model of torch's capture and
allocator bookkeeping. Only capture errors fall back (Config.graphs 'auto': a warning, the eager step; 'on': the worker
fails naming graphs='off'): a step that reads the device on the host or miscounts, a capture that fails (undone, its
pool given back under every order of torch's capture_end). An error of the warm-up and a sticky CUDA error end the
worker with their own text. The graphs' count and the seconds the captures took are reported per worker."""
import functools
import time
from types import SimpleNamespace

import pytest
import torch

import hogwild
from hogwild.models.nmt import nmt_loss
from hogwild.share.run_state import SharedCounters
from hogwild.worker import worker
from hogwild.worker.step_graph import StepGraphs
from tests.hogwild.worker.fake_cuda import ORDERS, FakeCuda
from tests.hogwild.worker.test_step_graph import EVERY_SHAPE, PADDED_NMT, config, nmt_batches, tiny_nmt

REFUSED = (r"capturing the step failed \(AcceleratorError: CUDA error: operation not permitted when stream is "
           r"capturing\)")


def as_for_a_gpu_worker(monkeypatch):
    """'auto' graphs 'cuda' workers only: here the 'cpu-replica' worker stands for one."""
    monkeypatch.setattr(hogwild.Config, "graphed", lambda self, device: self.graphs != "off")


def captured_on_fake_cuda(monkeypatch, order="after"):
    """The worker's step captured against the model of CUDA (its device stays the CPU)."""
    cuda = FakeCuda.install(monkeypatch, order)
    as_for_a_gpu_worker(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(worker, "StepGraphs", functools.partial(StepGraphs, capture=True))
    return cuda


def worker_spec(loss_fn, worker_index=0, **kwargs):
    return SimpleNamespace(model=tiny_nmt().share_memory(), loss_fn=loss_fn, device="cpu-replica", worker=worker_index,
                           counters=SharedCounters(worker_index + 1), config=config(**kwargs))


def test_with_auto_a_worker_whose_loss_reads_the_device_falls_back_to_the_eager_step(monkeypatch):
    as_for_a_gpu_worker(monkeypatch)
    spec = worker_spec(nmt_loss, graphs="auto")
    with pytest.warns(RuntimeWarning, match="worker 0: Config.graphs: the step reads the device.*runs the eager"):
        assert not worker.make_step(spec, nmt_batches()).graphed
    spec.config = config(graphs="on")
    with pytest.raises(RuntimeError, match=r"reads the device.*train with graphs='off' \(run.py --graphs off\)"):
        worker.make_step(spec, nmt_batches())
    spec.loss_fn, spec.config = PADDED_NMT, config(graphs="on", graph_limit=EVERY_SHAPE)
    assert worker.make_step(spec, nmt_batches()).graphed and spec.counters.snapshot().graphs() == 2


@pytest.mark.parametrize("order", ORDERS)
def test_with_auto_a_failed_capture_falls_back_to_the_eager_step_and_with_on_fails(monkeypatch, order):
    """The second shape's capture meets an op CUDA graphs refuse. With auto the worker warns once and goes eager, the
    capture undone before its empty_cache (capture.py; test_capture.py has the sequence) and every use of the step's
    pool given back once the step is collected (under torch with #180395 the failed capture's use leaked); with on it
    fails naming --graphs off."""
    cuda = captured_on_fake_cuda(monkeypatch, order)
    captures = []

    def refused_in_the_second_capture(model, batch):
        if cuda.current.status == "active":
            captures.append(batch)
            if len(captures) % 2 == 0:
                cuda.refuse()
        return PADDED_NMT(model, batch)

    spec = worker_spec(refused_in_the_second_capture, 1, graphs="auto", graph_limit=EVERY_SHAPE)
    with pytest.warns(RuntimeWarning, match=rf"worker 1: {REFUSED}; this worker runs the eager"):
        assert not worker.make_step(spec, nmt_batches()).graphed
    assert cuda.healthy() and cuda.log[-1] == "empty_cache", cuda.log  # no pool holds a use: all given back
    assert cuda.log.count("graph reset") == 2 and spec.counters.snapshot().graphs() == 0
    spec.config = config(graphs="on", graph_limit=EVERY_SHAPE)
    with pytest.raises(RuntimeError, match=rf"worker 1: {REFUSED}; train with graphs='off' \(run.py --graphs off\)"):
        worker.make_step(spec, nmt_batches())
    assert cuda.healthy()


def test_with_auto_a_loss_the_step_cannot_take_falls_back_to_the_eager_step(monkeypatch):
    def own_count_loss(model, batch):  # a count that is neither batch["tokens"] nor the batch size
        return PADDED_NMT(model, batch)[0], 7

    as_for_a_gpu_worker(monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"worker 0: Config.graphs: the loss counts 7 for a batch whose host-side "
                                            r"count is \d+ .*; this worker runs the eager step"):
        assert not worker.make_step(worker_spec(own_count_loss, graphs="auto"), nmt_batches()).graphed


def test_an_error_of_the_loss_in_the_warm_up_ends_the_worker_with_its_own_text(monkeypatch):
    """The probe ran; the loss fails in a warm-up step (as it would in the eager step): not a capture failure."""
    cuda = captured_on_fake_cuda(monkeypatch)
    calls = []

    def fails_in_the_warm_up(model, batch):
        calls.append(batch)
        if len(calls) == 2:
            raise ValueError("NMT batch has an empty source sentence")
        return PADDED_NMT(model, batch)

    with pytest.raises(ValueError, match="^NMT batch has an empty source sentence$"):
        worker.make_step(worker_spec(fails_in_the_warm_up, graphs="auto", graph_limit=EVERY_SHAPE), nmt_batches())
    assert "empty_cache" not in cuda.log and "capture begun" not in cuda.log


@pytest.mark.parametrize("where", ["warm-up", "capture"])
def test_a_sticky_cuda_error_ends_the_worker_with_its_own_text(monkeypatch, where):
    """A device-side assert in a warm-up kernel, reported at the synchronize before the capture, or an illegal address
    first reported inside the capture: the worker ends with that error, no fallback and no empty_cache (whose
    assert `captures_underway.empty()` once hid it)."""
    cuda = captured_on_fake_cuda(monkeypatch)

    def sticky_loss(model, batch):
        if where == "warm-up" and cuda.current.name.startswith("side") and cuda.current.status == "none":
            cuda.failure = cuda.error(710, "device-side assert triggered")  # a kernel's assert, reported later
        if where == "capture" and cuda.current.status == "active":
            cuda.sticky(700)
        return PADDED_NMT(model, batch)

    spec = worker_spec(sticky_loss, graphs="auto", graph_limit=EVERY_SHAPE)
    with pytest.raises(torch.AcceleratorError, match="device-side assert" if where == "warm-up" else "illegal memory"):
        worker.make_step(spec, nmt_batches())
    assert cuda.log.count("empty_cache") == (where == "capture"), cuda.log  # the capture's own, before it began


def test_the_graphs_and_the_seconds_their_capture_took_are_reported(monkeypatch):
    cuda = captured_on_fake_cuda(monkeypatch)

    def slow_loss(model, batch):
        time.sleep(0.02)
        return PADDED_NMT(model, batch)

    spec = worker_spec(slow_loss, 1, graphs="auto", graph_limit=EVERY_SHAPE)
    step = worker.make_step(spec, nmt_batches())
    snapshot = spec.counters.snapshot()
    assert step.graphed and snapshot.graphs(1) == 2 and cuda.log.count("capture ended") == 2
    assert snapshot.capture_seconds(1) >= 2 * 4 * 0.02  # probe, 2 warm-ups and the capture of 2 shapes
