"""Overlapped updates (Config.overlap_update) on the 'cpu-replica' device: update k lands in a background thread
while step k+1 computes. With one worker that is exactly the serial arithmetic with one step of delay, and the
delay shows in the staleness counters."""
import pytest
import torch

import hogwild
from hogwild.share.run_state import SharedCounters
from hogwild.shared_optim import SharedOptimizer
from hogwild.worker.updates import Update, Updater
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "devices": ["cpu-replica"],
                             **kwargs})


@pytest.mark.parametrize("name, lr, torch_optimizer", [
    ("sgd", 0.05, lambda params: torch.optim.SGD(params, lr=0.05)),
    ("adam", 0.01, lambda params: torch.optim.Adam(params, lr=0.01)),
])
def test_one_overlapped_worker_equals_the_serial_loop_with_one_step_of_delay(name, lr, torch_optimizer):
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(optimizer=name, lr=lr, epochs=2,
                                                               overlap_update=True))
    losses = H.delayed_reference(reference, H.mse_loss, batches, torch_optimizer(reference.parameters()),
                                 epochs=2, seed=3)
    assert result.updates == 20 and result.worker_updates == [20]
    # the first update lands before anything else; every later one lands after the worker's own previous one
    assert result.staleness_histogram[:3] == [1, 19, 0] and result.staleness_mean == pytest.approx(19 / 20)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert result.final_loss == pytest.approx(sum(losses[-20:]) / 20, rel=1e-5)
    assert set(result.phase_ms) == {"pull", "compute", "push", "update"} and result.phase_ms["update"] > 0


def test_overlapped_workers_stop_exactly_at_max_steps():
    batches = H.regression_batches(n=10)
    for workers in (1, 2):
        result = hogwild.train(H.regression_model(), H.mse_loss, batches, config(
            devices=["cpu-replica"] * workers, lr=0.05, max_steps=7, epochs=5, overlap_update=True))
        # exact with 2 workers too: the feed deals 7 tickets; a worker without a ticket lands its held update
        assert (result.updates, result.stop_reason) == (7, "max_steps")


def test_the_serial_path_stays_the_default_off_gpus():
    batches = H.regression_batches(n=6)
    result = hogwild.train(H.regression_model(), H.mse_loss, batches, config(lr=0.05))
    assert result.staleness_histogram[0] == 6  # no delay: cpu-replica keeps the serial path unless asked


def test_updater_holds_an_update_until_released_and_reraises_its_error():
    param = torch.nn.Parameter(torch.zeros(2))
    param.data.share_memory_()
    optimizer = SharedOptimizer([param], "sgd")
    view = SharedCounters(1).worker_view(0)
    updater = Updater(optimizer, [param], lambda step, epoch: 0.5, view, background=True)
    try:
        updater.submit(Update([torch.ones(2)], 0, 0, 4, 1.0, [0.0, 0.0, 0.0]))
        assert updater.in_flight() == 1 and torch.equal(param.detach(), torch.zeros(2))  # held back
        updater.release()
        updater.wait()
        assert updater.in_flight() == 0 and torch.equal(param.detach(), torch.full((2,), -0.5))
        assert view.global_updates() == 1
        updater.submit(Update([torch.ones(3)], 1, 0, 4, 1.0, [0.0, 0.0, 0.0]))  # wrong shape: fails in the thread
        updater.release()
        with pytest.raises(RuntimeError):
            updater.wait()
    finally:
        updater.shutdown()
