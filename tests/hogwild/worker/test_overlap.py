"""Overlapped updates (Config.overlap_update) on the 'cpu-replica' device: update k lands in a background thread
while step k+1 computes and the pull of step k+2 reads the parameters, neither waiting for the other; the delay shows
in the staleness counters."""
import dataclasses

import pytest
import torch

import hogwild
from hogwild.share.run_state import SharedCounters
from hogwild.shared_optim import SharedOptimizer
from hogwild.worker.updates import HostGradients, Update, Updater
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "devices": ["cpu-replica"],
                             **kwargs})


@pytest.mark.parametrize("name, lr, torch_optimizer", [
    ("sgd", 0.05, lambda params: torch.optim.SGD(params, lr=0.05)),
    ("adam", 0.01, lambda params: torch.optim.Adam(params, lr=0.01)),
])
def test_one_overlapped_worker_trains_a_step_or_two_behind_and_counts_it(name, lr, torch_optimizer):
    """The pull of step k+1 is issued beside update k-1 in flight and does not wait for it (the worker's own update
    k is held back), so each update counts 1 or 2 updates landed since its pull: 1 if update k-1 had landed when the
    pull was issued, 2 if not (then the pull may have read part of it: a torn read). The first counts 0."""
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    before = [H.mse_loss(reference, batch).item() for batch in batches]
    result = hogwild.train(model, H.mse_loss, batches, config(optimizer=name, lr=lr, epochs=2, overlap_update=True))
    assert result.updates == 20 and result.worker_updates == [20]
    histogram = result.staleness_histogram
    assert histogram[0] == 1 and histogram[1] + histogram[2] == 19 and not any(histogram[3:])
    assert sum(H.mse_loss(model, batch).item() for batch in batches) < 0.8 * sum(before)  # it trains
    if histogram[1] == 19:  # every pull was issued after the update before it had landed: the one-step-delayed loop
        H.delayed_reference(reference, H.mse_loss, batches, torch_optimizer(reference.parameters()), epochs=2, seed=3)
        for got, expected in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert set(result.phase_ms) == {"pull", "compute", "push", "update"} and result.phase_ms["update"] > 0


def test_the_next_pull_reads_the_parameters_while_the_previous_update_lands():
    """The cycle is not a copy and an update in series: the loop itself (in this process, 'cpu-replica', overlapped),
    with each update held in the optimizer until the next pull starts (at most 1 s). Were the pull issued only once
    the update had landed, every update would wait out that second instead."""
    import threading
    from types import SimpleNamespace

    from hogwild.feed.tickets import PartitionReader
    from hogwild.worker.gradients import NonFiniteStreak
    from hogwild.worker.device_step import DeviceStep
    from hogwild.worker.updates import SkipRule
    from hogwild.worker.worker import train_steps

    batches, run = H.regression_batches(n=5), config(overlap_update=True, epochs=1, shuffle=False, lr=0.05)
    model = H.regression_model().share_memory()
    view = SharedCounters(1).worker_view(0)
    step = DeviceStep(model, H.mse_loss, torch.device("cpu"), run, graphs=False)
    step.prepare(batches)
    pulls = threading.Condition()
    counts = {"pulls": 0, "at_release": []}  # pulls issued so far; their count when each update was released
    met = []  # per update: did a pull start while it was in flight?

    class HeldOptimizer(SharedOptimizer):
        def step(self, lr):
            with pulls:  # an update applied at the end, never released, waits for nothing
                released = counts["at_release"].pop(0) if counts["at_release"] else counts["pulls"] + 1
                met.append(pulls.wait_for(lambda: counts["pulls"] > released, timeout=1.0))
            super().step(lr)

    prefetch = step.pull.prefetch

    def counting_prefetch(version, batch=None):
        with pulls:
            counts["pulls"] += 1
            pulls.notify_all()
        prefetch(version, batch)

    step.pull.prefetch = counting_prefetch
    optimizer = HeldOptimizer(step.shared, "sgd")
    updater = Updater(optimizer, step.shared, run.schedule(), view, background=True,
                      skip=SkipRule(view, None, NonFiniteStreak(0, None)))
    release = updater.release

    def counting_release(*args):
        if updater.waiting is not None:
            with pulls:
                counts["at_release"].append(counts["pulls"])
        release(*args)

    updater.release = counting_release
    spec = SimpleNamespace(config=run, worker=0, device="cpu-replica", budget=None,
                           control=SimpleNamespace(wait_for_start=lambda stopped, limit: None))
    reader = PartitionReader(len(batches), 1, 0, 1, run.seed, False, lambda: False, view)
    try:
        train_steps(spec, reader, lambda: False, step, updater, batches)
        updater.finish()
    finally:
        updater.shutdown()
    # updates 0-2 land beside the pulls of steps 2-4; update 3 is released with no pull left, update 4 at the end
    assert view.global_updates() == 5 and met[:3] == [True, True, True]


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
        updater.submit(Update(HostGradients([torch.ones(2)], count=4, loss=1.0), 0, 0))
        assert updater.in_flight() == 1 and torch.equal(param.detach(), torch.zeros(2))  # held back
        updater.release()
        updater.wait()
        assert updater.in_flight() == 0 and torch.equal(param.detach(), torch.full((2,), -0.5))
        assert view.global_updates() == 1
        updater.submit(Update(HostGradients([torch.ones(3)]), 1, 0))  # wrong shape: fails in the thread
        updater.release()
        with pytest.raises(RuntimeError):
            updater.wait()
    finally:
        updater.shutdown()


def test_an_update_holds_its_result_and_whoever_applies_it_reads_the_rest_from_there():
    """Update carried placeholders (no gradients, loss 0.0, no phases) that the updater overwrote from the step's
    result; it holds the result, the version read and the epoch, and is never written."""
    param = torch.nn.Parameter(torch.zeros(2))
    param.data.share_memory_()
    counters = SharedCounters(1)
    updater = Updater(SharedOptimizer([param], "sgd"), [param], lambda step, epoch: 0.5, counters.worker_view(0),
                      background=False)
    update = Update(HostGradients([torch.ones(2)], count=3, loss=2.0, phases=(0.25, 0.5, 0.75)), 0, 0)
    updater.submit(update)
    snapshot = counters.snapshot()
    assert torch.equal(param.detach(), torch.full((2,), -0.5))
    assert (snapshot.examples(), snapshot.mean_loss()) == (3, 2.0)
    assert [snapshot.phase_milliseconds()[name] for name in ("pull", "compute", "push")] == [250.0, 500.0, 750.0]
    assert [field.name for field in dataclasses.fields(Update)] == ["result", "read_version", "epoch"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        update.epoch = 1
