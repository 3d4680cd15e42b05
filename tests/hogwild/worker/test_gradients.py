"""hogwild.worker.gradients: a step's arithmetic - gradient norms, clipping, finiteness checks, batch seeds and
sizes."""
import math

import pytest
import torch

from hogwild.worker.gradients import (
    GradientCheck,
    batch_examples,
    batch_seed,
    gradient_norm,
    gradient_stats,
    seed_batch,
    usable_gradients,
)


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
    assert len({batch_seed(0, e, i) for e in range(3) for i in range(100)}) == 300
    seed_batch(torch.device("cpu"), batch_seed(2**62, 7, 99))  # would overflow torch's generator unreduced
    first = torch.rand(3)
    seed_batch(torch.device("cpu"), batch_seed(2**62, 7, 99))
    assert torch.equal(torch.rand(3), first)


def test_batch_examples_reads_the_leading_dimension():
    assert batch_examples(torch.zeros(7, 3)) == 7
    assert batch_examples((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_examples({"words": torch.zeros(4, 9, dtype=torch.long)}) == 4


def test_gradient_stats_read_the_norm_or_the_check_and_the_loss():
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
