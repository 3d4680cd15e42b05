"""Two workers stepping one shared Adam state at the same moment, the interleaving forced by hand: worker B's whole
step runs right after the first operation of worker A's step that writes the first moment. Unfused, B then divides
A's fresh first moment by a second moment that lacks A's gradient, and an element B's own gradient barely touches
moves by thousands of lr (the flaky two-worker runs of test_frozen_tied.py: a weight of 0.5 became 103). Fused, one
pass per element writes the moments and the parameter together: B's step lands after A's, as in a serial run.
worker.device_options steps Adam fused whenever several workers share its state."""
import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hogwild
from hogwild.shared_optim import SharedOptimizer
from hogwild.worker.worker import device_options

LR = 0.01
GRAD_A, GRAD_B = torch.tensor([1.0, 1.0]), torch.tensor([1.0, 1e-6])  # B's batch barely touches element 1


class StepInside(TorchDispatchMode):
    """Runs `other()` once, right after the first operation that changes `watched`."""

    def __init__(self, watched: torch.Tensor, other):
        super().__init__()
        self.watched, self.other, self.before = watched, other, watched.clone()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.other is not None and not torch.equal(self.watched, self.before):
            other, self.other = self.other, None
            other()
        return out


def interleaved(fused: bool) -> tuple[torch.Tensor, dict]:
    """Both workers' first step on zero state, B's inside A's; the shared parameter and state afterwards."""
    shared = torch.zeros(2).share_memory_()
    params = [shared.detach().requires_grad_() for _ in range(2)]  # each worker's own object over the storage
    worker_a = SharedOptimizer([params[0]], "adam")
    worker_b = copy.copy(worker_a)  # the same shared state tensors, as a spawned worker receives them
    worker_a.attach([params[0]], fused=fused)
    worker_b.attach([params[1]], fused=fused)
    params[0].grad, params[1].grad = GRAD_A.clone(), GRAD_B.clone()
    with StepInside(worker_a.state[0]["exp_avg"], lambda: worker_b.step(LR)):
        worker_a.step(LR)
    return shared, worker_a.state[0]


def serial(fused: bool) -> tuple[torch.Tensor, dict]:
    """torch.optim.Adam: A's step, then B's."""
    param = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.Adam([param], lr=LR, fused=fused)
    for grad in (GRAD_A, GRAD_B):
        param.grad = grad.clone()
        optimizer.step()
    return param.detach(), optimizer.state[param]


def test_a_step_landing_inside_a_fused_adam_step_finds_it_whole():
    got, state = interleaved(fused=True)
    expected, expected_state = serial(fused=True)
    assert torch.equal(got, expected)  # exactly A then B: about -2 lr for both elements
    assert all(torch.equal(state[key], expected_state[key]) for key in ("step", "exp_avg", "exp_avg_sq"))
    assert got.abs().max() < 3 * LR


def test_inside_an_unfused_adam_step_it_divides_a_fresh_moment_by_a_stale_one():
    """Why several workers step fused: torch.optim's unfused Adam writes exp_avg before exp_avg_sq."""
    got, state = interleaved(fused=False)
    expected, _ = serial(fused=False)
    assert got[0].abs() < 3 * LR  # element 0: B's own gradient is as large as A's, the step stays near -2 lr
    assert got[1].abs() > 1000 * LR > 100 * expected[1].abs()  # element 1: 0.09 / sqrt(1e-15) in B's step
    assert state["step"] == 2


@pytest.mark.parametrize("device", ["cpu", "cpu-replica"])
def test_several_workers_step_adam_fused_and_one_worker_as_torch_optim_does(device):
    def fused(workers, optimizer="adam", **kwargs):
        config = hogwild.Config(devices=[device] * workers, optimizer=optimizer, **kwargs)
        return device_options(config, device, optimizer)["fused"]

    assert fused(2) and fused(3, lr=0.1)
    assert not fused(1)  # one worker: torch.optim's own unfused step, bit for bit
    assert not fused(2, "rmsprop") and not fused(2, "msgd")  # no fused kernel; no division by a moment
    assert not fused(2, fused_step=False)  # the user's choice stands
