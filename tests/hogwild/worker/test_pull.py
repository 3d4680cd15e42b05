"""The graphed step's double-buffered pull (hogwild/worker/pull.py) in its CPU form, where a prefetch copies at once:
each step trains on the parameters as they were when its prefetch was issued, never on a later update, and reports
that version; without a new prefetch (Config.pull_every) the replica keeps its parameters and their version."""
import pytest
import torch

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
