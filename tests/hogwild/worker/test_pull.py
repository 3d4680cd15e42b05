"""The graphed step's double-buffered pull (hogwild/worker/pull.py) in its CPU form, where a prefetch copies at once:
each step trains on the parameters as they were when its prefetch was issued, never on a later update, and reports
that version; without a new prefetch (Config.pull_every) the replica keeps its parameters and their version."""
import pytest
import torch

from hogwild.share.run_state import PhaseClock
from hogwild.worker.pull import PrefetchPull


def pull_of(shared, buffers=()):
    targets = [torch.zeros_like(t) for t in shared]
    target_buffers = [torch.zeros_like(t) for t in buffers]
    return PrefetchPull(list(shared), targets, list(buffers), target_buffers, torch.device("cpu")), targets


def test_a_step_trains_on_the_version_its_prefetch_saw():
    shared = [torch.zeros(3), torch.zeros(2, 2, dtype=torch.float64)]
    pull, replica = pull_of(shared)
    used = []
    pull.prefetch(0)  # before the first step
    for version in range(1, 5):
        step_version = pull.make_current()
        used.append((step_version, replica[0][0].item(), replica[1][0, 0].item()))
        for tensor in shared:
            tensor.add_(1)  # update `version` lands while the step computes ...
        pull.prefetch(version)  # ... and the next prefetch, issued after it, sees it
        for tensor in shared:
            tensor.add_(100)  # an update landing after the prefetch reaches only a later step
        pull.prefetch(version)  # (re-issued: the latest prefetch wins)
        for tensor in shared:
            tensor.sub_(100)
    assert used == [(0, 0.0, 0.0), (1, 101.0, 101.0), (2, 102.0, 102.0), (3, 103.0, 103.0)]


def test_without_a_new_prefetch_the_replica_keeps_its_parameters_and_version():
    shared = [torch.ones(2)]
    buffers = [torch.tensor([5], dtype=torch.int64)]
    pull, replica = pull_of(shared, buffers)
    with pytest.raises(RuntimeError, match="before the first prefetch"):
        pull.make_current()
    pull.prefetch(7)
    assert pull.make_current() == 7 and torch.equal(replica[0], torch.ones(2))
    assert int(pull.target_buffers[0]) == 5  # buffers travel with the parameters
    shared[0].fill_(9)
    assert pull.make_current() == 7 and torch.equal(replica[0], torch.ones(2))  # pull_every > 1: no new copy
    pull.target_buffers[0].fill_(6)  # forward wrote the replica's buffer
    pull.push_buffers()
    assert int(buffers[0]) == 6


def test_sparse_pull_copies_only_the_rows_the_batch_uses_and_a_row_read_outside_them_fails():
    """Config.sparse_pull: the prefetch of a step copies its batch's rows of a sparse table (the ids of its integer
    tensors) and the dense parameters whole; a rows-only prefetch (pull_every) moves the rows alone. A model that
    reads another row (stale in the replica) fails when its gradient is read."""
    import hogwild
    from hogwild.worker.device_step import DeviceStep
    from tests.hogwild import engine_helpers as H

    model = H.Tagger(vocab=50).share_memory()
    batch = {"words": torch.tensor([[1, 2]]), "tags": torch.tensor([[0, 1]])}  # ids in the batch: 0, 1, 2
    step = DeviceStep(model, H.tagger_loss, torch.device("cpu"), hogwild.Config(
        devices=["cpu-replica"], sparse_pull=True, progress=False, tensorboard=False), graphs=False)
    step.prepare([batch])
    replica = step.replica
    with torch.no_grad():
        model.embed.weight[[2, 40]] += 1.0  # another worker's update of a used and an unused row
        model.out.weight += 1.0
    step.pull.prefetch(5, batch)
    assert step.pull.make_current() == 5
    torch.testing.assert_close(replica.embed.weight[:3], model.embed.weight[:3], rtol=0, atol=0)
    assert not torch.equal(replica.embed.weight[40], model.embed.weight[40])  # never copied: nothing reads it
    torch.testing.assert_close(replica.out.weight, model.out.weight, rtol=0, atol=0)  # dense: whole
    with torch.no_grad():
        model.embed.weight[1] += 1.0
        model.out.weight += 1.0
    step.pull.prefetch(None, batch)  # pull_every: rows only
    assert step.pull.make_current() == 5  # the dense parameters' version
    torch.testing.assert_close(replica.embed.weight[1], model.embed.weight[1], rtol=0, atol=0)
    assert not torch.equal(replica.out.weight, model.out.weight)
    step.loss_fn = reads_row_45
    clock = PhaseClock(torch.device("cpu"))
    clock.mark(), clock.mark()
    result = step.run(batch, 0, clock)
    with pytest.raises(RuntimeError, match="not among its batch's integer tensors"):
        result.resolve()


def reads_row_45(model, batch):
    """The tagger's loss plus a read of embedding row 45, which no batch holds (stale in a row-pulled replica)."""
    from tests.hogwild import engine_helpers as H
    loss, count = H.tagger_loss(model, batch)
    return loss + model.embed(torch.tensor([45])).sum(), count
