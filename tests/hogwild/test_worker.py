"""hogwild.worker: one worker reproduces the serial torch loop; clipping; non-finite gradients; sparse rows."""
import math

import pytest
import torch

import hogwild
from hogwild.worker import GradientCheck, batch_examples, gradient_norm, usable_gradients
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, **kwargs})


@pytest.mark.parametrize("name, lr, torch_optimizer", [
    ("sgd", 0.05, lambda params: torch.optim.SGD(params, lr=0.05)),
    ("adam", 0.01, lambda params: torch.optim.Adam(params, lr=0.01)),
])
def test_one_worker_equals_the_serial_torch_loop(name, lr, torch_optimizer):
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(optimizer=name, lr=lr, epochs=2))
    losses = H.serial_reference(reference, H.mse_loss, batches, torch_optimizer(reference.parameters()),
                                epochs=2, seed=3)
    assert result.updates == 20 and result.worker_updates == [20]
    assert result.staleness_histogram[0] == 20 and result.staleness_mean == 0.0
    assert result.examples == 20 * 8
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert result.final_loss == pytest.approx(sum(losses[-20:]) / 20, rel=1e-5)  # one logging interval


def test_clipping_matches_clip_grad_norm():
    batches = H.regression_batches(n=8)
    model, reference = H.regression_model(), H.regression_model()
    hogwild.train(model, H.mse_loss, batches, config(lr=0.1, clip_norm=0.05))
    H.serial_reference(reference, H.mse_loss, batches, torch.optim.SGD(reference.parameters(), lr=0.1),
                       epochs=1, seed=3, clip_norm=0.05)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)


def test_non_finite_gradients_are_skipped_and_counted():
    batches = [(x, y, torch.tensor(i in (2, 5))) for i, (x, y) in enumerate(H.regression_batches(n=8))]
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.poisoned_loss, batches, config(lr=0.05))
    assert result.skipped_updates == 2
    assert result.updates == 6
    assert all(torch.isfinite(p).all() for p in model.parameters())
    clean = [(x, y) if not poison else (x, y * torch.nan) for x, y, poison in batches]
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for index in hogwild.feed.epoch_order(8, 3, 0, True):  # the serial loop, skipping the poisoned batches
        if index in (2, 5):
            continue
        torch.manual_seed(hogwild.worker.batch_seed(3, 0, int(index)))
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


def test_gradient_norm_reports_non_finite_and_clips_sparse_and_dense():
    dense = torch.zeros(3, requires_grad=True)
    dense.grad = torch.tensor([3.0, 0.0, 0.0])
    sparse = torch.zeros(4, 2, requires_grad=True)
    sparse.grad = torch.sparse_coo_tensor([[1, 1]], torch.tensor([[2.0, 0.0], [2.0, 0.0]]), (4, 2),
                                          check_invariants=True)  # row 1 twice
    assert gradient_norm([dense, sparse], clip_norm=None) == pytest.approx(5.0)  # sqrt(3^2 + (2+2)^2)
    assert gradient_norm([dense, sparse], clip_norm=1.0) == pytest.approx(5.0)
    torch.testing.assert_close(dense.grad, torch.tensor([0.6, 0.0, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(sparse.grad.to_dense()[1], torch.tensor([0.8, 0.0]), atol=1e-6, rtol=0)
    dense.grad = torch.tensor([1.0, math.inf, 0.0])
    assert not math.isfinite(gradient_norm([dense], clip_norm=1.0))
    assert usable_gradients([dense], clip_norm=None, check=False)  # Config(skip_nonfinite=False): no check
    assert not usable_gradients([dense, sparse], clip_norm=None)
    assert not usable_gradients([dense, sparse], clip_norm=1.0)
    dense.grad = torch.tensor([1.0, -1.0, 0.0])  # finite, summing to zero
    assert usable_gradients([dense, sparse], clip_norm=None)
    sparse.grad = torch.sparse_coo_tensor([[3]], torch.tensor([[math.nan, 0.0]]), (4, 2), check_invariants=True)
    assert not usable_gradients([dense, sparse], clip_norm=None)


def test_gradient_check_sums_each_gradient_during_backward_and_finds_nan_and_inf():
    weight = torch.tensor([0.0, 4.0], requires_grad=True)
    embed = torch.nn.Embedding(5, 2, sparse=True)
    params = [weight, embed.weight]
    check = GradientCheck(params)

    def step(loss):
        for param in params:
            param.grad = None
        loss.backward()
        return check.finite()

    assert step((weight + 1).sqrt().sum() + embed(torch.tensor([1, 1, 3])).sum())  # dense and sparse, finite
    assert check.sums == []  # finite() starts the next step afresh
    assert not step(weight.sqrt().sum())  # d sqrt(w)/dw at w = 0 is inf although the loss (2.0) is finite
    assert step(-weight[1].sqrt() + weight[1] / 4)  # finite gradients that sum to zero are fine
    assert not step((embed(torch.tensor([2])) * torch.tensor([math.nan, 1.0])).sum())  # NaN in a sparse gradient
    assert embed.weight.grad.is_sparse and weight.grad is None  # only the parameters backward reached


def test_batch_seeds_differ_per_batch_and_fit_the_generator_for_any_seed():
    from hogwild.worker import batch_seed, seed_batch
    assert len({batch_seed(0, e, i) for e in range(3) for i in range(100)}) == 300
    seed_batch(torch.device("cpu"), batch_seed(2**62, 7, 99))  # would overflow torch's generator unreduced
    first = torch.rand(3)
    seed_batch(torch.device("cpu"), batch_seed(2**62, 7, 99))
    assert torch.equal(torch.rand(3), first)


def test_batch_examples_reads_the_leading_dimension():
    assert batch_examples(torch.zeros(7, 3)) == 7
    assert batch_examples((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_examples({"words": torch.zeros(4, 9, dtype=torch.long)}) == 4


def test_the_learning_rate_schedule_is_applied_per_epoch():
    batches = H.regression_batches(n=6)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(lr=0.05, epochs=3, lr_schedule="linear_decay",
                                                              decay_per_epoch=0.02, min_lr=0.005))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for epoch, lr in enumerate([0.05, 0.03, 0.01]):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for index in hogwild.feed.epoch_order(6, 3, epoch, True):
            torch.manual_seed(hogwild.worker.batch_seed(3, epoch, int(index)))
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
    from hogwild.worker import device_options
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


def test_gradient_stats_read_the_norm_or_the_check_and_the_loss():
    from hogwild.worker import gradient_stats
    weight = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    check = GradientCheck([weight])
    loss = (weight * torch.tensor([1.0, 2.0])).sum()
    loss.backward()  # grad (1, 2): sum 3, norm sqrt(5)
    assert gradient_stats([weight], check, None, loss) == (True, None, 11.0)
    usable, scale, value = gradient_stats([weight], None, 1.0, loss)
    assert usable and value == 11.0 and scale == pytest.approx(1.0 / (5 ** 0.5 + 1e-6))
    assert gradient_stats([weight], None, 10.0, loss)[1] is None  # under the limit: no clipping
    weight.grad[0] = float("nan")
    check.sums.append(weight.grad.sum())
    assert gradient_stats([weight], check, None, loss)[0] is False
    assert gradient_stats([weight], None, 1.0, loss)[:2] == (False, None)
    assert gradient_stats([weight], None, None, loss) == (True, None, 11.0)  # nothing checked
