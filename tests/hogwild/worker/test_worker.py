"""hogwild.worker.worker: one worker equals the serial torch loop; clipping; non-finite gradients; sparse rows;
devices."""
import pytest
import torch

import hogwild
from hogwild.worker.gradients import batch_seed
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, **kwargs})


@pytest.mark.parametrize("name, lr, torch_optimizer, clip_norm", [
    ("sgd", 0.05, lambda params: torch.optim.SGD(params, lr=0.05), 0.05),  # clipping as clip_grad_norm_ does
    ("adam", 0.01, lambda params: torch.optim.Adam(params, lr=0.01), None),
])
def test_one_worker_equals_the_serial_torch_loop(name, lr, torch_optimizer, clip_norm):
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(optimizer=name, lr=lr, epochs=2, clip_norm=clip_norm))
    losses = H.serial_reference(reference, H.mse_loss, batches, torch_optimizer(reference.parameters()),
                                epochs=2, seed=3, clip_norm=clip_norm)
    assert result.updates == 20 and result.worker_updates == [20]
    assert result.staleness_histogram[0] == 20 and result.staleness_mean == 0.0
    assert result.examples == 20 * 8
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert result.final_loss == pytest.approx(sum(losses[-20:]) / 20, rel=1e-5)  # one logging interval


def test_non_finite_gradients_are_skipped_and_counted():
    batches = [(x, y, torch.tensor(i in (2, 5))) for i, (x, y) in enumerate(H.regression_batches(n=8))]
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.poisoned_loss, batches, config(lr=0.05))
    assert result.skipped_updates == 2
    assert result.updates == 6
    assert all(torch.isfinite(p).all() for p in model.parameters())
    clean = [(x, y) if not poison else (x, y * torch.nan) for x, y, poison in batches]
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for index in hogwild.feed.tickets.epoch_order(8, 3, 0, True):  # the serial loop, skipping the poisoned batches
        if index in (2, 5):
            continue
        torch.manual_seed(batch_seed(3, 0, int(index)))
        optimizer.zero_grad()
        H.mse_loss(reference, clean[index]).backward()
        optimizer.step()
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_sparse_embedding_rows_never_touched_stay_bit_identical(name):
    model = H.Tagger(vocab=50)
    before = model.embed.weight.detach().clone()
    result = hogwild.train(model, H.tagger_loss, H.tagger_batches(n=12, words_used=20),
                           config(workers=2, optimizer=name, lr=0.1, epochs=2))
    after = model.embed.weight.detach()
    assert result.updates == 24
    assert result.examples == 24 * 10  # loss_fn's token count
    assert torch.equal(after[20:], before[20:])  # untouched rows: bit for bit
    assert not torch.equal(after[:20], before[:20])


def test_the_learning_rate_schedule_is_applied_per_epoch():
    batches = H.regression_batches(n=6)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(lr=0.05, epochs=3, lr_schedule="linear_decay",
                                                              decay_per_epoch=0.02, min_lr=0.005))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for epoch, lr in enumerate([0.05, 0.03, 0.01]):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for index in hogwild.feed.tickets.epoch_order(6, 3, epoch, True):
            torch.manual_seed(batch_seed(3, epoch, int(index)))
            optimizer.zero_grad()
            H.mse_loss(reference, batches[int(index)]).backward()
            optimizer.step()
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert result.records[-1]["lr"] == pytest.approx(0.01)


@pytest.mark.parametrize("mode, workers", [("hogwild", 2), ("sync", 2)])
@pytest.mark.timeout(120)
def test_diverged_parameters_fail_the_run_instead_of_skipping_forever(tmp_path, mode, workers):
    """NaN shared parameters make every gradient non-finite: nothing is applied, so max_steps is never reached.
    After max_nonfinite_in_a_row skips in a row the run fails, naming a worker, with the checkpoint written."""
    model = H.regression_model()
    with torch.no_grad():
        model[0].weight.fill_(float("nan"))
    failure = r"(?s)worker \d \(cpu, pid \d+\) raised.*: 5 updates in a row had non-finite"
    with pytest.raises(hogwild.WorkerFailed, match=failure):
        hogwild.train(model, H.mse_loss, H.regression_batches(n=8), config(
            workers=workers, mode=mode, max_steps=100, max_nonfinite_in_a_row=5, checkpoint_dir=str(tmp_path)))
    assert (tmp_path / "last.pt").exists()


def test_max_nonfinite_in_a_row_is_validated():
    with pytest.raises(ValueError, match="max_nonfinite_in_a_row"):
        config(max_nonfinite_in_a_row=0)


def test_device_options_turn_the_gpu_speedups_on_for_cuda_workers_only():
    from hogwild.worker.worker import device_options
    auto = hogwild.Config()
    assert device_options(auto, "cuda:1", "adam") == {"overlap": True, "fused": True, "pin": True}
    assert device_options(auto, "cuda:0", "rmsprop")["fused"] is False  # torch has no fused RMSprop
    assert device_options(auto, "cpu-replica", "adam") == {"overlap": False, "fused": False, "pin": False}
    assert device_options(auto, "cpu", "adam") == {"overlap": False, "fused": False, "pin": False}
    forced = hogwild.Config(devices=["cpu-replica"], overlap_update=True, fused_step=True, pin_shared=False)
    assert device_options(forced, "cpu-replica", "adam") == {"overlap": True, "fused": True, "pin": False}
    assert device_options(forced, "cpu", "adam")["overlap"] is False  # 'cpu' workers update in place
    off = hogwild.Config(devices=["cuda:0"], overlap_update=False, fused_step=False, pin_shared=False)
    assert device_options(off, "cuda:0", "adam") == {"overlap": False, "fused": False, "pin": False}
