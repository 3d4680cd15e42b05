"""hogwild.worker.sync: mode='sync' equals the serial loop that averages the gradients of each group of W batches."""
import pytest
import torch

import hogwild
from hogwild.feed.tickets import epoch_order
from hogwild.shared_optim import SharedOptimizer
from hogwild.worker.gradients import batch_seed
from tests.hogwild import engine_helpers as H


@pytest.mark.parametrize("device", ["cpu", "cpu-replica"])  # cpu-replica: averaged on the replicas, then copied
def test_sync_two_workers_equal_serial_averaged_gradient_sgd(device):
    batches = H.regression_batches(n=9)  # 5 steps per epoch: the last group has a single batch
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, hogwild.Config(
        devices=[device] * 2, mode="sync", lr=0.05, optimizer="msgd", epochs=2, seed=2, progress=False, tensorboard=False))
    assert result.updates == 10
    assert result.staleness_mean == 0.0
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(2):
        order = [int(i) for i in epoch_order(9, 2, epoch, True)]
        for first in range(0, 9, 2):
            group = order[first:first + 2]
            optimizer.zero_grad()
            for index in group:
                torch.manual_seed(batch_seed(2, epoch, index))
                (H.mse_loss(reference, batches[index]) / len(group)).backward()
            optimizer.step()
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "cpu-replica"])
def test_sync_averages_sparse_gradients_over_the_touched_rows(device):
    """Sparse embedding gradients stay sparse: sync Adam equals a serial loop that applies each group's averaged
    sparse gradient with the same shared optimizer (lazy rows: a row's moments move only at steps that touch it).
    7 batches on 2 workers: the last step has one batch, and the idle rank still joins the row exchange."""
    batches = H.tagger_batches(n=7, words_used=20)
    model, reference, initial = H.Tagger(), H.Tagger(), H.Tagger()
    result = hogwild.train(model, H.tagger_loss, batches, hogwild.Config(
        devices=[device] * 2, mode="sync", lr=0.01, optimizer="adam", epochs=1, seed=3, progress=False,
        tensorboard=False))
    assert result.updates == 4
    optimizer = SharedOptimizer(list(reference.share_memory().parameters()), "adam")
    order = [int(i) for i in epoch_order(7, 3, 0, True)]
    for first in range(0, 7, 2):
        group = order[first:first + 2]
        reference.zero_grad()
        for index in group:
            torch.manual_seed(batch_seed(3, 0, index))
            (H.tagger_loss(reference, batches[index])[0] / len(group)).backward()
        optimizer.step(0.01)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(model.embed.weight[20:], initial.embed.weight[20:])  # rows no batch used
    assert not torch.equal(model.embed.weight[:20], initial.embed.weight[:20])


def test_process_group_backend_nccl_only_for_one_gpu_per_rank():
    from hogwild.worker.sync import process_group_backend
    assert process_group_backend(["cuda:0", "cuda:1"]) == "nccl"
    assert process_group_backend(["cuda:0", "cuda:0"]) == "gloo"  # NCCL cannot run two ranks on one device
    assert process_group_backend(["cuda", "cuda:0"]) == "gloo"
    assert process_group_backend(["cpu", "cpu"]) == "gloo"
