"""A device worker (run on the CPU as 'cpu-replica': device_step.py's step, pulled by pull.py, copied out by
copy_out.py) trains as the direct path does; hogwild.worker.replica: the sync worker's pull and push."""
import pytest
import torch

import hogwild
from hogwild.worker.replica import DeviceReplica, SharedParameters, make_parameters, move_batch
from tests.hogwild import engine_helpers as H


def test_cpu_replica_worker_matches_direct_cpu_worker():
    batches = H.regression_batches(n=12)
    finals, phases = [], {}
    for device in ("cpu", "cpu-replica"):
        model = H.regression_model()
        result = hogwild.train(model, H.mse_loss, batches, hogwild.Config(
            devices=[device], optimizer="adam", lr=0.01, epochs=2, seed=4, progress=False, tensorboard=False))
        assert result.updates == 24
        phases[device] = result.phase_ms
        finals.append([p.detach().clone() for p in model.parameters()])
    for direct, replica in zip(*finals):
        torch.testing.assert_close(direct, replica, rtol=0, atol=0)
    assert set(phases["cpu-replica"]) == {"pull", "compute", "push", "update"}
    assert all(ms > 0 for ms in phases["cpu-replica"].values())  # every phase of the replica path ran
    assert phases["cpu"]["compute"] > 0 and phases["cpu"]["update"] > 0


def test_replica_pulls_shared_values_and_pushes_gradients_onto_the_shared_parameters():
    model = H.Tagger(vocab=10).share_memory()
    params = make_parameters(model, "cpu-replica")
    assert isinstance(params, DeviceReplica)
    with torch.no_grad():
        model.out.weight.add_(1.0)  # another worker's update
    net = params.pull()
    assert net is not model and torch.equal(net.out.weight, model.out.weight)
    assert net.out.weight.data_ptr() != model.out.weight.data_ptr()  # a private copy
    loss, _ = H.tagger_loss(net, {"words": torch.tensor([[1, 2]]), "tags": torch.tensor([[0, 1]])})
    loss.backward()
    grads = params.push()  # host gradients, in the order of the shared parameters
    embed, out = grads[0], grads[1]
    assert embed.is_sparse
    assert sorted(embed.coalesce().indices()[0].tolist()) == [1, 2]
    torch.testing.assert_close(out, net.out.weight.grad, rtol=0, atol=0)
    assert params.host[0] is None  # no page-locked buffer for the sparse table's gradient
    params.clear()
    assert model.out.weight.grad is None and net.out.weight.grad is None
    assert isinstance(make_parameters(model, "cpu"), SharedParameters)


def test_move_batch_keeps_structure():
    batch = {"a": torch.zeros(2), "b": (torch.ones(1), [torch.ones(3)]), "n": 5}
    moved = move_batch(batch, torch.device("cpu"))
    assert set(moved) == {"a", "b", "n"} and moved["n"] == 5
    assert isinstance(moved["b"], tuple) and isinstance(moved["b"][1], list)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_sparse_pull_trains_exactly_like_the_full_pull(name):
    batches = H.tagger_batches(n=10, words_used=20)
    finals = []
    for sparse_pull in (False, True):
        model = H.Tagger(vocab=50)
        result = hogwild.train(model, H.tagger_loss, batches, hogwild.Config(
            devices=["cpu-replica"], optimizer=name, lr=0.05, epochs=2, seed=1, sparse_pull=sparse_pull,
            progress=False, tensorboard=False))
        assert result.updates == 20
        finals.append([p.detach().clone() for p in model.parameters()])
    for full, rows in zip(*finals):
        torch.testing.assert_close(full, rows, rtol=0, atol=0)


def test_bf16_autocast_trains_like_the_autocast_serial_loop_and_keeps_fp32_parameters():
    batches = H.regression_batches(n=8)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, hogwild.Config(
        devices=["cpu-replica"], optimizer="adam", lr=0.01, epochs=1, seed=2, amp="bf16", progress=False,
        tensorboard=False))
    H.serial_reference(reference, H.bf16_mse_loss, batches, torch.optim.Adam(reference.parameters(), lr=0.01),
                       epochs=1, seed=2)
    assert result.updates == 8
    for got, expected in zip(model.parameters(), reference.parameters()):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)


def test_fused_step_worker_equals_the_serial_loop_with_torchs_fused_adam():
    batches = H.regression_batches(n=8)
    model, reference = H.regression_model(), H.regression_model()
    hogwild.train(model, H.mse_loss, batches, hogwild.Config(
        devices=["cpu-replica"], optimizer="adam", lr=0.01, epochs=2, seed=2, fused_step=True, progress=False,
        tensorboard=False))
    H.serial_reference(reference, H.mse_loss, batches, torch.optim.Adam(reference.parameters(), lr=0.01, fused=True),
                       epochs=2, seed=2)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
