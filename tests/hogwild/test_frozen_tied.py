"""Frozen parameters (requires_grad=False), tied parameters (one Parameter in two modules) and non-float buffers:
shared and checkpointed like the rest; only the trainable parameters get hooks, gradients, optimizer state and
updates, a tied one once per step. Every worker kind against the serial torch loop."""
import dataclasses
import os

import pytest
import torch

import hogwild
from hogwild.share import checkpoint as C
from hogwild.shared_optim import SharedOptimizer, private_copy, trainable_parameters, unique_nbytes
from hogwild.worker.gradients import GradientCheck
from hogwild.worker.replica import make_parameters, sparse_tables
from tests.hogwild import engine_helpers as H
from tests.hogwild import frozen_tied_model as F

KINDS = {"cpu": {"devices": ["cpu"]}, "cpu-replica": {"devices": ["cpu-replica"]},
         "graphed": {"devices": ["cpu-replica"], "graphs": "on"},  # the graphed step's code, without capture
         "sync": {"devices": ["cpu"], "mode": "sync"},
         "cuda": {"devices": ["cuda:0"], "overlap_update": False}}  # not one step behind: the serial loop's order
CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="needs CUDA (the same replica path runs here as 'cpu-replica')")
WORKER_KINDS = ["cpu", "cpu-replica", "graphed", "sync", pytest.param("cuda", marks=CUDA)]
TORCH_OPTIMIZERS = {"sgd": lambda params: torch.optim.SGD(params, lr=0.2),
                    "adam": lambda params: torch.optim.Adam(params, lr=0.02)}
LR = {"sgd": 0.2, "adam": 0.02}


def config(kind, workers=1, **kwargs):
    setup = {**KINDS[kind], "devices": KINDS[kind]["devices"] * workers}
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 7, **setup, **kwargs})


def frozen_values(model):
    return {name: tensor.detach().clone() for name, tensor in model.named_parameters() if name in F.FROZEN}


def assert_frozen_equal(model, expected):
    for name, tensor in model.named_parameters():
        if name in F.FROZEN:
            assert torch.equal(tensor, expected[name]), name  # bit-identical
            assert not tensor.requires_grad and tensor.grad is None


def assert_tied_in_file(path):
    state = torch.load(path, weights_only=False)["model"]
    embed, out = state["embed.weight"], state["out.weight"]
    assert embed.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()  # stored once, loads back tied
    return state


# --- the pieces, in this process --------------------------------------------------------------------------------

def test_only_trainable_parameters_are_listed_each_tied_one_once():
    model = F.FrozenTiedLM()
    names = {id(p): name for name, p in model.named_parameters()}
    assert [names[id(p)] for p in trainable_parameters(model)] == list(F.TRAINABLE)
    assert model.out.weight is model.embed.weight


@pytest.mark.parametrize("device", ["cpu", "cpu-replica"])
def test_workers_hook_pull_and_push_only_trainable_parameters(device):
    model = F.FrozenTiedLM().share_memory()
    with torch.no_grad():
        model.positions.mul_(2.0)  # a resumed value: the replica must see it, not the constructor's
        model.forwards.fill_(5)
    params = make_parameters(model, device)
    check = GradientCheck(params.grad_params)  # raised on a frozen parameter before
    net = params.pull()
    assert torch.equal(net.positions, model.positions) and torch.equal(net.frozen.weight, model.frozen.weight)
    assert net.forwards.dtype == torch.int64 and int(net.forwards) == 5 and torch.equal(net.allowed, model.allowed)
    assert net.out.weight is net.embed.weight  # the replica keeps the tie
    F.next_word_loss(net, F.word_batches(n=1)[0]).backward()
    assert check.total() is not None
    grads = params.push()
    if device == "cpu":
        assert grads is None
        grads = [p.grad for p in params.shared]
    assert len(grads) == len(F.TRAINABLE) and all(g is not None for g in grads)
    assert net.positions.grad is None and net.frozen.weight.grad is None
    assert int(model.forwards) == 6  # the int buffer written by forward reaches the shared model
    params.clear()


def test_a_frozen_sparse_table_is_not_a_trained_one():
    model = H.Tagger()
    assert sparse_tables(model) == {0: model.embed}
    model.embed.weight.requires_grad_(False)
    assert sparse_tables(model) == {}


def test_optimizer_state_only_for_trainable_parameters():
    model = F.FrozenTiedLM().share_memory()
    optimizer = SharedOptimizer(trainable_parameters(model), "adam")
    assert [tuple(s["exp_avg"].shape) for s in optimizer.state] == [(F.VOCAB, F.DIM), (F.DIM, F.DIM), (F.DIM,)]
    assert SharedOptimizer.state_nbytes(trainable_parameters(model), "adam") == \
        2 * 4 * (F.VOCAB * F.DIM + F.DIM * F.DIM + F.DIM) + 3 * 4


def test_checkpoint_copy_keeps_ties_dtypes_and_frozen_values(tmp_path):
    model = F.FrozenTiedLM()
    model.forwards.fill_(3)
    state = private_copy(model.state_dict())
    assert state["embed.weight"] is state["out.weight"]
    assert state["embed.weight"].data_ptr() != model.embed.weight.data_ptr()  # a private copy
    assert unique_nbytes(model.state_dict()) == sum(t.numel() * t.element_size() for t in model.state_dict().values()) \
        - F.VOCAB * F.DIM * 4  # the tied weight counted once
    path = str(tmp_path / "x.pt")
    C.save_checkpoint(path, {"model": state})
    loaded = assert_tied_in_file(path)
    assert loaded["forwards"].dtype == torch.int64 and int(loaded["forwards"]) == 3
    assert loaded["allowed"].dtype == torch.bool and torch.equal(loaded["allowed"], model.allowed)
    other = F.FrozenTiedLM(seed=1)
    C.restore_model(other, {"model": loaded})
    assert other.out.weight is other.embed.weight and torch.equal(other.embed.weight, model.embed.weight)
    assert_frozen_equal(other, frozen_values(model))


def test_a_model_with_every_parameter_frozen_is_refused():
    model = F.FrozenTiedLM().requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter with requires_grad=True"):
        hogwild.train(model, F.next_word_loss, F.word_batches(), config("cpu", lr=0.1))


# --- whole runs -------------------------------------------------------------------------------------------------

# Adam on every kind (its state is per trainable parameter, and a tie stepped twice or a frozen parameter stepped at
# all changes its moments); plain SGD's own update path (one add, no state but the step) on the two update paths
# it can take: hooks on the shared parameters ('cpu') and pushed gradients ('cpu-replica'). The graphed step and
# sync mode differ from those in the step and the averaging, which do not depend on the optimizer.
@pytest.mark.parametrize("kind, optimizer", [("cpu", "adam"), ("cpu-replica", "adam"), ("graphed", "adam"),
                                             ("sync", "adam"), pytest.param("cuda", "adam", marks=CUDA),
                                             ("cpu", "sgd"), ("cpu-replica", "sgd")])
def test_one_worker_equals_the_serial_loop_through_a_checkpoint_and_resume(tmp_path, kind, optimizer):
    """Epoch 1, then a resume (into a model built with another seed, so every value must come from last.pt) for
    epoch 2: the serial torch loop over the trainable parameters, frozen values bit-identical, the tie intact."""
    batches = F.word_batches(n=6)
    model, reference = F.FrozenTiedLM(), F.FrozenTiedLM()
    initial = frozen_values(model)
    run = config(kind, optimizer=optimizer, lr=LR[optimizer], checkpoint_dir=str(tmp_path))
    first = hogwild.train(model, F.next_word_loss, batches, dataclasses.replace(run, epochs=1))
    assert first.updates == 6 and int(model.forwards) == 6, (first.stop_reason, first.worker_updates,
                                                             int(model.forwards), first.graphs)
    assert_frozen_equal(model, initial)
    assert_tied_in_file(first.checkpoint)
    assert len(torch.load(first.checkpoint, weights_only=False)["optimizer"]["state"]) == len(F.TRAINABLE)

    resumed = F.FrozenTiedLM(seed=1)
    second = hogwild.train(resumed, F.next_word_loss, batches, dataclasses.replace(run, epochs=2, resume=True))
    assert second.updates == 12, (second.stop_reason, second.worker_updates)
    H.serial_reference(reference, F.next_word_loss, batches, TORCH_OPTIMIZERS[optimizer](F.trainable(reference)),
                       epochs=2, seed=7)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if kind == "cuda" else {"rtol": 1e-6, "atol": 1e-7}  # GPU kernels
    for (name, got), expected in zip(resumed.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, msg=name, **tolerance)
    assert_frozen_equal(resumed, initial)
    assert resumed.out.weight is resumed.embed.weight
    assert resumed.forwards.dtype == torch.int64 and int(resumed.forwards) == 12 == int(reference.forwards)
    assert torch.equal(resumed.allowed, reference.allowed)
    assert_tied_in_file(os.path.join(tmp_path, C.LAST))


# 'cpu-replica' is left to the one-worker test: 'graphed' runs its pull and copy-out, with the graphed step on top.
@pytest.mark.parametrize("kind", [kind for kind in WORKER_KINDS if kind != "cpu-replica"])
def test_two_workers_train_with_dropout_and_keep_frozen_values(tmp_path, kind):
    batches = F.word_batches(n=12)
    model = F.FrozenTiedLM(dropout=0.1)
    initial, before = frozen_values(model), F.dataset_loss(model, batches)
    result = hogwild.train(model, F.next_word_loss, batches, config(
        kind, workers=2, optimizer="adam", lr=0.02, epochs=4, checkpoint_dir=str(tmp_path)))
    assert result.updates == (24 if kind == "sync" else 48)
    assert F.dataset_loss(model, batches) < 0.8 * before
    assert_frozen_equal(model, initial)
    assert model.out.weight is model.embed.weight
    assert model.forwards.dtype == torch.int64 and 0 < int(model.forwards) <= 48  # concurrent += may lose counts
    assert torch.equal(model.allowed, F.FrozenTiedLM().allowed)
    saved = assert_tied_in_file(result.checkpoint)
    assert torch.equal(saved["positions"], initial["positions"])
    if kind == "sync":  # deterministic: the serial loop averaging each pair of batches, same dropout masks
        reference = F.FrozenTiedLM(dropout=0.1)
        F.serial_sync_reference(reference, F.next_word_loss, batches,
                                torch.optim.Adam(F.trainable(reference), lr=0.02), epochs=4, seed=7, workers=2)
        for got, expected in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
