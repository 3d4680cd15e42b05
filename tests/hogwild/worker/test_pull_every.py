"""Config.pull_every: a device worker ('cpu-replica' here) pulls the dense parameters every K-th update only. K=1 is
the serial loop exactly; K>1 is the serial loop whose replica is refreshed every K steps, and the staleness counters
count the updates each step's copy missed."""
import copy

import pytest
import torch

import hogwild
from hogwild.config import ConfigError
from hogwild.feed.tickets import epoch_order
from hogwild.worker.gradients import batch_seed
from tests.hogwild import engine_helpers as H


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "devices": ["cpu-replica"],
                             "optimizer": "sgd", "lr": 0.05, "epochs": 2, **kwargs})


def pull_every_reference(model, loss_fn, batches, lr: float, epochs: int, seed: int, every: int,
                         rows_of=None) -> list[float]:
    """The plain SGD loop a worker with pull_every=`every` reproduces: the gradient of step i is computed on a copy
    of the parameters taken at step every * (i // every) and applied to the parameters themselves; rows_of(batch)
    -> the embedding rows (of `embed`) copied fresh at every step (sparse_pull)."""
    net, losses, step = copy.deepcopy(model), [], 0
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for index in epoch_order(len(batches), seed, epoch, True):
            if step % every == 0:
                with torch.no_grad():
                    for replica, param in zip(net.parameters(), model.parameters()):
                        replica.copy_(param)
            if rows_of is not None:
                with torch.no_grad():
                    rows = rows_of(batches[int(index)])
                    net.embed.weight[rows] = model.embed.weight[rows]
            step += 1
            torch.manual_seed(batch_seed(seed, epoch, int(index)))
            net.zero_grad(set_to_none=True)
            out = loss_fn(net, batches[int(index)])
            loss = out[0] if isinstance(out, tuple) else out
            loss.backward()
            for param, replica in zip(model.parameters(), net.parameters()):
                param.grad = replica.grad
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_pull_every_one_is_the_serial_loop_bit_for_bit():
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(pull_every=1))
    losses = H.serial_reference(reference, H.mse_loss, batches, torch.optim.SGD(reference.parameters(), lr=0.05),
                                epochs=2, seed=3)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert result.staleness_histogram[:2] == [20, 0]
    assert result.final_loss == pytest.approx(sum(losses) / 20, rel=1e-12)


@pytest.mark.parametrize("every, histogram", [(3, [7, 7, 6, 0]), (4, [5, 5, 5, 5])])
def test_pull_every_k_trains_on_copies_k_steps_old_and_counts_their_staleness(every, histogram):
    batches = H.regression_batches(n=10)
    model, reference = H.regression_model(), H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(pull_every=every))
    losses = pull_every_reference(reference, H.mse_loss, batches, lr=0.05, epochs=2, seed=3, every=every)
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # step i computes on the copy pulled at step every * (i // every): i % every updates landed since
    assert result.updates == 20 and result.staleness_histogram[:4] == histogram
    assert result.staleness_mean == pytest.approx(sum(i % every for i in range(20)) / 20)
    assert sum(losses[-10:]) < sum(losses[:10])  # it trains: the second epoch's loss is below the first's


def test_pull_every_keeps_pulling_the_sparse_rows_of_each_batch():
    batches = H.tagger_batches(n=10, words_used=20)
    model, reference = H.Tagger(vocab=50), H.Tagger(vocab=50)
    result = hogwild.train(model, H.tagger_loss, batches, config(pull_every=3, sparse_pull=True, seed=1))
    pull_every_reference(reference, H.tagger_loss, batches, lr=0.05, epochs=2, seed=1, every=3,
                         rows_of=lambda batch: batch["words"].unique())
    for got, expected in zip(model.parameters(), reference.parameters()):  # sparse rows: summed in another order
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert result.staleness_histogram[:4] == [7, 7, 6, 0]  # the dense layer's age, which the rows never exceed


@pytest.mark.parametrize("kwargs, message", [
    (dict(devices=["cpu"], pull_every=2), "pull nothing"),
    (dict(devices=["cpu-replica"], pull_every=0), "must be > 0"),
    (dict(devices=["cpu", "cpu"], mode="sync", pull_every=2), "pull nothing"),
])
def test_pull_every_is_refused_where_nothing_is_pulled(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        hogwild.Config(**kwargs)
