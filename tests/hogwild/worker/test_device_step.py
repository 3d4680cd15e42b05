"""The graphed step (Config.graphs, hogwild/worker/device_step.py, copy_out.py, pull.py) in its CPU form: the same
static inputs, gradient copy-out, device-side clipping and late skip as on a GPU, without the capture. Whole runs on
'cpu-replica' against the eager step (graphs='off', the reference): one step's gradients bit for bit (clipped on the
device), whole runs within a few ulps (ULPS), POS's sparse rows within float rounding; the step reads nothing from
the device (every host read patched to raise); a batch shape without a graph runs eager, counted. On a GPU (marked
cuda): the captured worker against the eager one, and the step under torch's sync debug mode 'error'."""
import functools
import json

import pytest
import torch

import hogwild
from hogwild.config import ConfigError
from hogwild.data.batching import pad_lengths
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss
from hogwild.share.run_state import PhaseClock
from hogwild.worker.device_step import (GRAPH_MIN_USES, DeviceStep, NotGraphable, batch_signature, graph_shapes,
                                        host_count, shape_buckets, shape_counts)
from tests.hogwild import engine_helpers as H
from tests.models.conftest import nmt_batch, pos_batch

# Whole runs: the graphed step feeds its static inputs, the eager one views of the batch store; a BLAS may take
# another code path (and round differently in the last bit) for other memory alignment, so parameters after a run
# compare within a few ulps, not bit for bit.
ULPS = dict(rtol=1e-6, atol=1e-7)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (graph capture; no GPU on this machine)")


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "optimizer": "sgd", "lr": 0.05,
                             "epochs": 2, "devices": ["cpu-replica"], **kwargs})


def final_parameters(model_factory, loss_fn, batches, **kwargs):
    model = model_factory()
    result = hogwild.train(model, loss_fn, batches, config(**kwargs))
    return result, [p.detach().clone() for p in model.parameters()]


def tiny_nmt():
    torch.manual_seed(0)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=6, hidden=7, attention=5, readout=4))


def tiny_tagger():
    torch.manual_seed(0)
    return POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=6, char_hidden=5,
                               word_hidden=6, word_layers=1, sparse_embeddings=True))


def counted(batch):
    if "tgt_mask" in batch:
        return {**batch, "tokens": int(batch["tgt_mask"][:, 1:].sum())}
    return {**batch, "tokens": int((batch["tags"] != -100).sum())}


def nmt_batches():
    """Two shapes once padded to multiples of 4: (3, 8)/(3, 8) three times, (3, 4)/(3, 4) once."""
    lengths = [([4, 2, 6], [3, 2, 1]), ([5, 1, 3], [2, 3, 1]), ([1, 2, 1], [1, 1, 2]), ([3, 6, 2], [1, 2, 3])]
    return [counted(pad_lengths(nmt_batch(src, tgt, seed=i), 4)) for i, (src, tgt) in enumerate(lengths)]


def pos_batches():
    return [counted(pos_batch(lengths, seed=i, extra_pad=pad)) for i, (lengths, pad) in
            enumerate([([3, 1], 1), ([2, 4], 0), ([4, 2], 0), ([1], 3)])]


PADDED_NMT = functools.partial(nmt_loss, padded=True)
PADDED_POS = functools.partial(pos_loss, padded=True)


def poisoned_without_host_reads(model, batch):
    """mse_loss whose gradient is NaN when the batch's third element is 1, decided on the device."""
    x, y, poison = batch
    return H.mse_loss(model, (x, y)) * torch.where(poison.bool(), torch.nan, 1.0)


def miscounting_loss(model, batch):
    return H.mse_loss(model, batch), 5  # not the batch's 8 examples


# --- the pieces --------------------------------------------------------------------------------------------------

def test_shapes_are_ranked_by_frequency_then_first_appearance_and_host_fields_do_not_count():
    a, b, c = torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(5, dtype=torch.int64)
    batches = [{"x": b, "tokens": 1}, {"x": a, "tokens": 2}, {"x": a, "tokens": 3}, {"x": b, "tokens": 4},
               {"x": c, "tokens": 5}]
    assert batch_signature(batches[1]) == batch_signature(batches[2]) == ((("x",), torch.float32, (2, 3)),)
    assert shape_buckets(shape_counts(batches)) == [(batch_signature(batches[0]), 0), (batch_signature(batches[1]), 1),
                                                    (batch_signature(batches[4]), 4)]
    assert shape_buckets(shape_counts(batches), limit=1) == [(batch_signature(batches[0]), 0)]
    assert host_count(batches[3]) == 4 and host_count((torch.zeros(7, 2),)) == 7


EVERY_SHAPE = 8  # a graph_limit above the shapes of these few batches: each gets a graph, however rare


def prepared(make, loss_fn, batches, limit=EVERY_SHAPE, **kwargs):
    model = make().share_memory()
    step = DeviceStep(model, loss_fn, torch.device("cpu"), config(**kwargs))
    return model, step, step.prepare(batches, shapes=shape_buckets(shape_counts(batches), limit))


def run_one(step, batch, slot=0):
    clock = PhaseClock(torch.device("cpu"))
    clock.mark()
    step.pull.prefetch(0)
    step.pull.make_current()
    clock.mark()
    result = step.run(batch, slot, clock)
    finite, loss, grads, phases = result.resolve()
    return result, finite, loss, grads


def test_a_step_copies_the_batch_into_static_inputs_and_sends_the_eager_gradients():
    batches = nmt_batches()
    model, step, graphs = prepared(tiny_nmt, PADDED_NMT, batches, clip_norm=0.05)
    assert graphs == 2
    static = step.graphs[batch_signature(batches[1])]
    addresses = [t.data_ptr() for t in static.inputs]
    result, finite, loss, grads = run_one(step, batches[1])
    assert not result.eager and finite and result.count == batches[1]["tokens"]
    assert [t.data_ptr() for t in static.inputs] == addresses  # filled in place
    assert torch.equal(static.static["src"], batches[1]["src"]) and torch.equal(static.static["tgt"], batches[1]["tgt"])
    reference = tiny_nmt()  # the eager step: loss, backward, clip as gradients.gradient_norm does
    expected_loss, _ = PADDED_NMT(reference, static.static)  # the same memory: BLAS may round by alignment
    expected_loss.backward()
    hogwild.worker.gradients.gradient_norm(list(reference.parameters()), 0.05)
    assert loss == expected_loss.item()
    for got, param in zip(grads, reference.parameters()):
        assert torch.equal(got, param.grad)  # clipped on the device, bit for bit


def test_a_shape_without_a_graph_runs_eager_with_the_same_result():
    batches = nmt_batches()
    _, step, graphs = prepared(tiny_nmt, PADDED_NMT, batches, limit=1)
    assert graphs == 1 and batch_signature(batches[2]) not in step.graphs
    eager, finite, loss, grads = run_one(step, batches[2])
    _, graphed_step, _ = prepared(tiny_nmt, PADDED_NMT, batches)
    graphed, _, graphed_loss, graphed_grads = run_one(graphed_step, batches[2])
    assert eager.eager and not graphed.eager and loss == pytest.approx(graphed_loss, rel=1e-6)
    for a, b in zip(grads, graphed_grads):
        torch.testing.assert_close(a, b, **ULPS)


def test_sparse_tables_send_the_rows_they_read_as_the_eager_sparse_gradient():
    batches = pos_batches()
    _, step, _ = prepared(tiny_tagger, PADDED_POS, batches)
    _, finite, _, grads = run_one(step, batches[0])
    reference = tiny_tagger()
    PADDED_POS(reference, step.graphs[batch_signature(batches[0])].static)[0].backward()
    for got, param in zip(grads, reference.parameters()):
        if param.grad.is_sparse:
            expected = param.grad.coalesce()
            assert got.is_sparse and got.is_coalesced()
            assert torch.equal(got.indices(), expected.indices())  # the rows read, padding row 0 excluded
            torch.testing.assert_close(got.values(), expected.values(), rtol=0, atol=1e-7)
        else:
            assert torch.equal(got, param.grad)


def test_a_sparse_row_read_outside_the_batch_ids_fails_loudly():
    def reads_row_29(model, batch):
        loss, tokens = PADDED_POS(model, batch)
        return loss + model.word_embedding(torch.tensor([29])).sum(), tokens

    batches = pos_batches()
    _, step, _ = prepared(tiny_tagger, reads_row_29, batches)
    with pytest.raises(RuntimeError, match="not among its batch's integer tensors"):
        run_one(step, batches[0])


class HostRead(AssertionError):
    pass


@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_the_step_reads_nothing_from_the_device(task, monkeypatch):
    make, loss_fn, batches = (tiny_nmt, PADDED_NMT, nmt_batches()) if task == "nmt" else \
        (tiny_tagger, PADDED_POS, pos_batches())
    _, step, _ = prepared(make, loss_fn, batches, clip_norm=1.0)
    clock = PhaseClock(torch.device("cpu"))
    step.pull.prefetch(0)
    step.pull.make_current()
    clock.mark()
    clock.mark()
    with monkeypatch.context() as patch:
        for name in ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__"):
            patch.setattr(torch.Tensor, name, lambda *a, name=name, **k: (_ for _ in ()).throw(HostRead(name)))
        result = step.run(batches[0], 0, clock)  # the whole compute section: copy-in, step, clip, copy-out
    assert result.resolve()[0]  # read afterwards, by the update thread


def test_a_loss_that_reads_the_device_is_refused_at_start_up():
    with pytest.raises(NotGraphable, match="reads the device on the host"):
        prepared(tiny_nmt, nmt_loss, nmt_batches())  # the packed loss reads its lengths
    with pytest.raises(NotGraphable, match="loss counts 5 for a batch whose host-side count is 8"):
        prepared(H.regression_model, miscounting_loss, H.regression_batches(n=2))


# --- whole runs against the eager step -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(clip_norm=0.05), dict(overlap_update=True, optimizer="adam", lr=0.01)])
def test_a_graphed_nmt_worker_ends_with_the_eager_workers_parameters(kwargs):
    batches = nmt_batches()
    eager, expected = final_parameters(tiny_nmt, PADDED_NMT, batches, graphs="off", **kwargs)
    graphed, got = final_parameters(tiny_nmt, PADDED_NMT, batches, graphs="on", graph_limit=EVERY_SHAPE, **kwargs)
    assert graphed.updates == eager.updates == 8 and (graphed.graphs, graphed.eager_steps) == (2, 0)
    if not (one_step_behind(graphed) and one_step_behind(eager)):
        return  # an overlapped pull read beside an update still landing: the two runs' arithmetic may differ
    assert graphed.staleness_histogram == eager.staleness_histogram
    assert graphed.final_loss == pytest.approx(eager.final_loss, rel=1e-6)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **ULPS)


def one_step_behind(result):
    """Whether every pull of an overlapped run was issued after the update before it had landed (every update counts
    at most 1 landed since its pull; then the run is the serial arithmetic with one step of delay, exactly)."""
    return not any(result.staleness_histogram[2:])


def test_a_graphed_pos_worker_with_sparse_tables_and_adam_ends_near_the_eager_one():
    batches = pos_batches()
    eager, expected = final_parameters(tiny_tagger, PADDED_POS, batches, graphs="off", optimizer="adam", lr=0.01)
    graphed, got = final_parameters(tiny_tagger, PADDED_POS, batches, graphs="on", optimizer="adam", lr=0.01,
                                    graph_limit=EVERY_SHAPE)
    assert graphed.updates == eager.updates == 8 and graphed.graphs == 2  # (2, 4) three times, (1, 4)
    assert eager.eager_share is None  # no graphed worker: no eager share in metrics.jsonl
    assert "eager_share" not in eager.records[-1] and "eager_share" in graphed.records[-1]
    for a, b in zip(got, expected):  # the embeddings' gradient summed densely or sparsely: rounding
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_shapes_past_the_graph_limit_run_eager_and_are_counted(tmp_path):
    """Against the serial torch loop, run in this process: the eager 'cpu-replica' worker is that loop (bit for bit
    with Adam, test_replica.py; SGD within 1e-6, test_frozen_tied.py)."""
    sizes = list(range(1, 19)) + [1, 2]  # 18 shapes; sizes 1 and 2 twice, so ranked first
    batches = [(torch.randn(n, 4), torch.randn(n, 1)) for n in sizes]
    reference = H.regression_model()
    H.serial_reference(reference, H.mse_loss, batches, torch.optim.SGD(reference.parameters(), lr=0.05), epochs=1,
                       seed=3, shuffle=False)
    graphed, got = final_parameters(H.regression_model, H.mse_loss, batches, graphs="on", epochs=1, shuffle=False,
                                    graph_limit=16, checkpoint_dir=str(tmp_path))
    assert graphed.graphs == 16 and graphed.eager_steps == 2  # sizes 17 and 18
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (prepared,) = [r for r in records if r["kind"] == "graphs"]  # per graphed worker, before training started
    assert prepared["workers"] == [0] and prepared["graphs"] == [16] and prepared["capture_seconds"][0] >= 0
    assert graphed.eager_share == pytest.approx(2 / 20)
    for a, b in zip(got, reference.parameters()):
        torch.testing.assert_close(a, b.detach(), **ULPS)


def test_without_a_limit_every_shape_the_run_uses_often_enough_gets_a_graph():
    """A graph costs its warm-up and capture, GRAPH_MIN_USES eager steps: a shape used fewer times over the run's
    epochs runs eager. 30 shapes, no constant cap: sizes 1-24 four times each, 25-30 once (and twice over 2 epochs)."""
    sizes = [n for n in range(1, 25) for _ in range(GRAPH_MIN_USES)] + list(range(25, 31))
    batches = [(torch.randn(n, 4), torch.randn(n, 1)) for n in sizes]
    counts = shape_counts(batches)
    assert len(graph_shapes(counts, None, epochs=1)) == 24
    assert len(graph_shapes(counts, None, epochs=GRAPH_MIN_USES)) == 30
    assert len(graph_shapes(counts, 5, epochs=None)) == 5
    graphed, _ = final_parameters(H.regression_model, H.mse_loss, batches, graphs="on", epochs=2, shuffle=False)
    assert graphed.graphs == 24 and graphed.eager_steps == 12  # six shapes used twice
    assert graphed.eager_share == pytest.approx(12 / graphed.updates)
    last = graphed.records[-1]  # metrics.jsonl's last train record
    assert (last["eager_steps"], last["eager_share"]) == (12, graphed.eager_share)
    with pytest.raises(ConfigError, match="graph_limit"):
        config(graph_limit=0)


@pytest.mark.parametrize("overlap", [False, True])
def test_non_finite_steps_are_skipped_one_step_late_and_max_steps_stays_exact(overlap):
    batches = [(*batch, torch.tensor(int(i in (2, 5)))) for i, batch in enumerate(H.regression_batches(n=8))]
    runs = [final_parameters(H.regression_model, poisoned_without_host_reads, batches, graphs=graphs, epochs=None,
                             max_steps=8, shuffle=False, overlap_update=overlap) for graphs in ("off", "on")]
    (eager, expected), (graphed, got) = runs
    assert graphed.updates == eager.updates == 8 and graphed.skipped_updates == eager.skipped_updates == 2
    assert all(torch.isfinite(t).all() for t in (*got, *expected))  # no NaN gradient ever written
    if overlap:  # a pull may read beside an update still landing: the arithmetic may differ, the skips may not.
        return  # The staleness histogram cannot rule that out here: a skipped update is not counted as landed, so a
        # pull issued early and followed by a skip still reads as one step behind (seen on a loaded machine)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **ULPS)


@pytest.mark.parametrize("kwargs, message", [
    (dict(graphs="yes"), "must be one of"),
    (dict(graphs="on", devices=["cpu"]), "needs device workers"),
    (dict(graphs="on", devices=["cpu-replica"] * 2, mode="sync"), "needs device workers"),
    (dict(graphs="on", devices=["cpu-replica"], compile="aot_eager"), "use graphs='off'"),
])
def test_bad_graph_options_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        hogwild.Config(**kwargs)


def test_auto_graphs_cuda_workers_only():
    auto = hogwild.Config(devices=["cpu-replica"])
    assert auto.graphed("cuda:0") and not auto.graphed("cpu-replica") and not auto.graphed("cpu")
    assert not hogwild.Config(compile="default").graphed("cuda:0")
    assert hogwild.Config(devices=["cpu-replica"], graphs="on").graphed("cpu-replica")


# --- on a GPU ------------------------------------------------------------------------------------------------------

@CUDA
@pytest.mark.parametrize("kwargs", [dict(clip_norm=0.05), dict(overlap_update=False)])
def test_a_captured_gpu_worker_ends_with_the_eager_gpu_workers_parameters(kwargs):
    batches = nmt_batches()
    eager, expected = final_parameters(tiny_nmt, PADDED_NMT, batches, devices=["cuda:0"], graphs="off", **kwargs)
    graphed, got = final_parameters(tiny_nmt, PADDED_NMT, batches, devices=["cuda:0"], graphs="on",
                                    graph_limit=EVERY_SHAPE, **kwargs)
    assert graphed.updates == eager.updates == 8 and (graphed.graphs, graphed.eager_steps) == (2, 0)
    if not (one_step_behind(graphed) and one_step_behind(eager)):
        return  # overlapped (the default on a GPU): a pull read beside an update still landing
    for a, b in zip(got, expected):  # the same kernels replayed: only cuDNN's choices may differ
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@CUDA
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_the_captured_step_never_synchronises_the_gpu(task):
    make, loss_fn, batches = (tiny_nmt, PADDED_NMT, nmt_batches()) if task == "nmt" else \
        (tiny_tagger, PADDED_POS, pos_batches())
    model = make().share_memory()
    step = DeviceStep(model, loss_fn, torch.device("cuda:0"), config(devices=["cuda:0"], clip_norm=1.0))
    assert step.prepare(batches) == len({batch_signature(b) for b in batches})
    clock = PhaseClock(torch.device("cuda:0"))
    step.pull.prefetch(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        clock.mark()
        step.pull.make_current()
        clock.mark()
        result = step.run(batches[0], 0, clock)  # copy-in, replay, copy-out, the next prefetch
        step.pull.prefetch(1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    finite, loss, grads, phases = result.resolve()
    assert finite and not result.eager and len(phases) == 3 and all(p >= 0 for p in phases)
    reference = make()
    expected, _ = loss_fn(reference, batches[0])
    assert loss == pytest.approx(expected.item(), rel=1e-5)
