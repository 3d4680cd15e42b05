"""The background update thread (updates.py): bound to its worker's device, with torch threads of its own
(Config.update_threads), and bit-identical results whatever their number."""
import pytest
import torch

import hogwild
from hogwild.config import ConfigError
from hogwild.share.run_state import SharedCounters
from hogwild.shared_optim import SharedOptimizer
from hogwild.worker.process_prelude import bound_device
from hogwild.worker.updates import HostGradients, Update, Updater, update_threads
from tests.hogwild import engine_helpers as H

# Shapes like the paper NMT model's large tensors, scaled down; each spans several of torch's parallel chunks.
SHAPES = [(300, 620), (620, 300), (1000,), (3, 70001), (5,)]


def test_the_update_thread_binds_the_worker_device_and_its_own_thread_count():
    param = torch.zeros(2).share_memory_()
    before = torch.get_num_threads()
    updater = Updater(SharedOptimizer([param], "sgd"), [param], lambda step, epoch: 0.1,
                      SharedCounters(1).worker_view(0), background=True, device=torch.device("cpu"), threads=2)
    try:
        seen = updater.executor.submit(lambda: (bound_device(), torch.get_num_threads())).result()
    finally:
        updater.shutdown()
    assert seen == (torch.device("cpu"), 2)
    assert bound_device() is None and torch.get_num_threads() == before  # the calling thread is left as it was


def test_automatic_update_threads_share_the_cores_among_gpu_workers():
    gpu = hogwild.Config(devices=["cuda:0"])
    assert update_threads(gpu, "cuda:0", cores=16) == 14  # the parent and the worker's main thread keep one each
    assert update_threads(hogwild.Config(devices=["cuda:0", "cuda:0"]), "cuda:0", cores=16) == 6
    assert update_threads(gpu, "cuda:0", cores=2) == 1
    assert update_threads(hogwild.Config(devices=["cuda:0"], update_threads=3), "cuda:0", cores=16) == 3
    replica = hogwild.Config(devices=["cpu-replica"], overlap_update=True, threads_per_worker=2)
    assert update_threads(replica, "cpu-replica", cores=16) == 2  # it computes on the CPU: threads_per_worker


@pytest.mark.parametrize("settings", [
    {"workers": 2}, {"devices": ["cpu-replica"]}, {"devices": ["cuda:0"], "overlap_update": False},
    {"devices": ["cuda:0", "cuda:1"], "mode": "sync"}, {"devices": ["cuda:0"], "update_threads": 0}])
def test_update_threads_is_refused_without_an_update_thread(settings):
    with pytest.raises(ConfigError, match="update_threads"):
        hogwild.Config(**{"update_threads": 2, **settings})


def _steps(name: str, fused: bool, threads: int, steps: int = 3) -> tuple[list[torch.Tensor], list[dict]]:
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(shape, generator=generator).share_memory_() for shape in SHAPES]
    optimizer = SharedOptimizer(params, name)
    optimizer.attach(params, fused=fused)
    updater = Updater(optimizer, params, lambda step, epoch: 0.01, SharedCounters(1).worker_view(0),
                      background=True, threads=threads)
    try:
        for step in range(steps):
            grads = [torch.randn(shape, generator=generator) for shape in SHAPES]
            updater.submit(Update(HostGradients(grads, loss=1.0), step, 0))
            updater.release()
            updater.wait()
    finally:
        updater.shutdown()
    return params, optimizer.state_dict()["state"]


@pytest.mark.parametrize("name, fused", [("sgd", False), ("msgd", False), ("msgd", True), ("adam", False),
                                         ("adam", True), ("adagrad", True)])
def test_several_update_threads_give_bit_identical_parameters_and_state(name, fused):
    one_params, one_state = _steps(name, fused, threads=1)
    two_params, two_state = _steps(name, fused, threads=2)
    for one, two in zip(one_params, two_params):
        assert torch.equal(one, two)
    for one, two in zip(one_state, two_state):
        assert one.keys() == two.keys() and all(torch.equal(one[key], two[key]) for key in one)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices (no such machine here)")
def test_a_worker_on_cuda_1_opens_no_context_on_cuda_0():
    flags = torch.zeros(1).share_memory_()
    result = hogwild.train(H.regression_model(), H.CudaContextProbe(flags), H.regression_batches(n=10), hogwild.Config(
        devices=["cuda:1"], overlap_update=True, lr=0.05, epochs=2, progress=False, tensorboard=False))
    assert result.updates == 20
    assert flags[0] == 0  # neither the main thread nor the update thread ever touched cuda:0
