"""Config.compile and Config.tf32 in real worker processes: a worker with a compiled step ends with eager's
parameters (within rtol 1e-5, atol 1e-6: the compiled graphs may sum in another order), and the TF32 setting
reaches every worker process. The captured graphs run with backend 'aot_eager' (Config.compile='aot_eager'), except
in the slow test of inductor's code generation ('default'); 'reduce-overhead' needs CUDA. Every batch shape compiles
in start-up, before the worker reports ready (worker.compile_every_shape)."""
import os

import pytest
import torch

import hogwild
from hogwild.config import ConfigError
from hogwild.data.batching import pad_lengths
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from tests.hogwild import engine_helpers as H
from tests.models.conftest import nmt_batch

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "optimizer": "sgd", "lr": 0.05,
                             "epochs": 2, **kwargs})


def final_parameters(model_factory, loss_fn, batches, **kwargs):
    model = model_factory()
    result = hogwild.train(model, loss_fn, batches, config(**kwargs))
    return result, [p.detach().clone() for p in model.parameters()]


def regression_model():
    return H.regression_model(dropout=0.0)  # a compiled step draws dropout masks with another generator


@pytest.fixture(scope="module")
def eager_run():
    """device -> (result, parameters) of the eager worker on H.regression_batches(n=8): one run per device for the
    module (the aot_eager and the inductor tests compare with the same 'cpu-replica' run)."""
    runs = {}

    def run(device):
        if device not in runs:
            runs[device] = final_parameters(regression_model, H.mse_loss, H.regression_batches(n=8), devices=[device])
        return runs[device]
    return run


@pytest.mark.parametrize("device", ["cpu", "cpu-replica"])
def test_one_compiled_worker_ends_with_the_eager_workers_parameters(device, eager_run):
    batches = H.regression_batches(n=8)
    eager, expected = eager_run(device)
    compiled, got = final_parameters(regression_model, H.mse_loss, batches, devices=[device], compile="aot_eager")
    assert compiled.updates == eager.updates == 16
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **TOLERANCE)
    assert compiled.final_loss == pytest.approx(eager.final_loss, rel=1e-5)


def tiny_nmt():
    torch.manual_seed(0)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=12, hidden=16, attention=14, readout=10))


@pytest.mark.slow  # tens of seconds: the worker captures the unrolled decoder once
def test_a_compiled_nmt_worker_on_length_buckets_ends_with_the_eager_parameters():
    lengths = [([4, 2, 6], [3, 2, 1]), ([5, 1, 3], [2, 3, 1]), ([3, 6, 2], [1, 2, 3]), ([2, 2, 2], [3, 3, 2])]
    batches = [pad_lengths(nmt_batch(src, tgt, seed=i), 8) for i, (src, tgt) in enumerate(lengths)]
    assert len({(b["src"].shape, b["tgt"].shape) for b in batches}) == 1  # one bucket: one compilation
    eager, expected = final_parameters(tiny_nmt, nmt_loss, batches, devices=["cpu-replica"], clip_norm=1.0)
    compiled, got = final_parameters(tiny_nmt, nmt_loss, batches, devices=["cpu-replica"], clip_norm=1.0,
                                     compile="aot_eager")
    assert compiled.updates == eager.updates == 8
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **TOLERANCE)


@pytest.mark.slow  # inductor generates and compiles C++ in the worker: tens of seconds
def test_inductor_compiled_worker_ends_with_the_eager_workers_parameters(eager_run):
    batches = H.regression_batches(n=8)
    _, expected = eager_run("cpu-replica")
    compiled, got = final_parameters(regression_model, H.mse_loss, batches, devices=["cpu-replica"],
                                     compile="default")
    assert compiled.updates == 16
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **TOLERANCE)


def tf32_checking_loss(model, batch):
    """mse_loss that fails unless this process's TF32 setting is what $HOGWILD_TEST_TF32 says."""
    if torch.backends.cuda.matmul.allow_tf32 != (os.environ["HOGWILD_TEST_TF32"] == "1"):
        raise RuntimeError(f"allow_tf32 is {torch.backends.cuda.matmul.allow_tf32} in the worker")
    return H.mse_loss(model, batch)


@pytest.mark.parametrize("tf32", [False, True])
def test_tf32_is_set_in_every_worker_process(monkeypatch, tf32):
    monkeypatch.setenv("HOGWILD_TEST_TF32", "1" if tf32 else "0")
    result = hogwild.train(regression_model(), tf32_checking_loss, H.regression_batches(n=4),
                           config(devices=["cpu", "cpu-replica"], tf32=tf32, epochs=1))
    assert result.updates == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(compile="max"), "must be one of"),
    (dict(devices=["cpu", "cpu"], mode="sync", compile="default"), "not to mode='sync'"),
    (dict(tf32=1), "True or False"),
])
def test_bad_step_options_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        hogwild.Config(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CUDA graphs; no GPU on this machine)")
def test_reduce_overhead_gpu_worker_ends_with_the_eager_gpu_workers_parameters():
    lengths = [([4, 2, 6], [3, 2, 1]), ([5, 1, 3], [2, 3, 1]), ([3, 6, 2], [1, 2, 3]), ([2, 2, 2], [3, 3, 2])]
    batches = [pad_lengths(nmt_batch(src, tgt, seed=i), 8) for i, (src, tgt) in enumerate(lengths)]
    # The eager reference is the eager step (the packed loss reads the device, so graphs='auto' would fall back
    # to it after a probe anyway). The compiled worker compiles its one shape before it reports ready: inside the
    # start-up bound, not the hang watch's 60 s (compiling during the first step is what killed it on the H200).
    eager, expected = final_parameters(tiny_nmt, nmt_loss, batches, devices=["cuda:0"], clip_norm=1.0, graphs="off")
    graphs, got = final_parameters(tiny_nmt, nmt_loss, batches, devices=["cuda:0"], clip_norm=1.0,
                                   compile="reduce-overhead")
    assert graphs.graphs == 0  # Config.graphs='auto' leaves a compiled step to torch.compile
    assert graphs.updates == eager.updates == 8 and graphs.skipped_updates == 0, (graphs.stop_reason,
                                                                                   graphs.worker_updates)
    for a, b in zip(got, expected):  # cuDNN and the generated kernels: a looser bound than on the CPU
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_every_batch_shape_compiles_in_start_up_and_forward_written_buffers_are_put_back(tmp_path, monkeypatch):
    """compile_every_shape (before the worker reports ready): one compilation per shape, none left for training; a
    worker after the first waits for worker 0, then compiles with the run's inductor cache."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from hogwild.share.run_state import SharedCounters
    from hogwild.worker.gradients import compiled_loss
    from hogwild.worker.in_place import InPlaceStep
    from hogwild.worker.worker import compile_every_shape
    from tests.hogwild import frozen_tied_model as F

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))  # under tmp_path: torch may create it
    torch._dynamo.reset()
    model = F.FrozenTiedLM().share_memory()
    batches = [F.word_batches(n=1, size=size)[0] for size in (2, 3, 2, 4)]  # three shapes
    shared = SharedCounters(2)
    spec = SimpleNamespace(worker=1, counters=shared, store=SimpleNamespace(path=str(tmp_path / "batches.pt")),
                           config=config())
    step = compiled_loss(F.next_word_loss, "aot_eager")
    params = InPlaceStep(model, step, spec.config)
    stopped = iter([False, False, True]).__next__  # worker 0 never gets ready here: stop waiting after two looks
    compile_every_shape(spec, lambda: stopped(), params, batches)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    compiled = counters["stats"]["unique_graphs"]
    assert compiled >= 2 and int(model.forwards) == 0  # (a size that changed compiles dynamic); the counter put back
    assert all(p.grad is None for p in params.shared)
    for batch in batches:  # training: no shape left to compile
        step(model, batch).backward()
    assert counters["stats"]["unique_graphs"] == compiled
