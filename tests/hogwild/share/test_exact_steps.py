"""max_steps is exact (issue #14 item 7): workers claim update slots atomically (run_state.StepBudget), so 2 workers
on a fast model stop at exactly max_steps, also when resumed; a skipped (non-finite) update gives its slot back."""
import multiprocessing

import hogwild
from hogwild.share.run_state import StepBudget
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "lr": 0.01, "workers": 2,
                             **kwargs})


def test_one_or_two_fast_workers_stop_at_exactly_max_steps():
    batches = H.regression_batches(n=40)  # 1 worker: 5 tickets an item, so max_steps falls inside an item
    for workers, steps in ((1, 13), (2, 2), (2, 61)):
        result = hogwild.train(H.regression_model(), H.mse_loss, batches, config(max_steps=steps, workers=workers))
        assert (result.updates, sum(result.worker_updates), result.stop_reason) == (steps, steps, "max_steps")


def test_resumed_runs_stop_at_exactly_max_steps(tmp_path):
    batches = H.regression_batches(n=40)
    first = hogwild.train(H.regression_model(), H.mse_loss, batches,
                          config(max_steps=23, checkpoint_dir=str(tmp_path)))
    assert first.updates == 23
    second = hogwild.train(H.regression_model(), H.mse_loss, batches,
                           config(max_steps=51, checkpoint_dir=str(tmp_path), resume=True))
    assert (second.updates, second.stop_reason) == (51, "max_steps")


def test_a_budget_hands_out_exactly_its_slots_and_takes_released_ones_back():
    budget = StepBudget(multiprocessing.get_context("spawn"), max_steps=5, done=3)
    assert [budget.claim() for _ in range(3)] == [True, True, False]
    budget.release()  # e.g. a non-finite gradient: the update was not applied
    assert budget.claim() and not budget.claim()
