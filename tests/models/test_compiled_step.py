"""The models' losses under torch.compile (hogwild.worker.gradients.compiled_loss, what a worker with Config.compile
runs) give eager's loss and gradients, and NMT batches padded to length buckets (data.batching.pad_lengths) give the
unpadded batch's. The captured graphs run with backend 'aot_eager' here (inductor's code generation takes minutes
per model on a busy CPU): the same capture, AOTAutograd's backward and the same graph breaks as a compiled worker.

Tolerance: rtol 1e-5, atol 1e-6 on the loss and every gradient (the captured graphs run decomposed ops, which may
sum in another order); dropout is 0, since a compiled step draws its masks with another generator."""
import functools

import pytest
import torch
import torch._dynamo

from hogwild.data.batching import pad_lengths
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss
from hogwild.worker.gradients import compiled_loss

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def tiny_nmt():
    torch.manual_seed(0)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=12, hidden=16, attention=14, readout=10))


def tiny_pos():
    torch.manual_seed(0)
    return POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=6, word_emb=10, char_hidden=8,
                               word_hidden=12, sparse_embeddings=True))


def loss_and_grads(loss_fn, model, batch):
    model.zero_grad(set_to_none=True)
    loss, tokens = loss_fn(model, batch)
    loss.backward()
    grads = [None if p.grad is None else p.grad.to_dense() if p.grad.is_sparse else p.grad.clone()
             for p in model.parameters()]
    return loss.detach(), tokens, grads


def assert_same(got, expected):
    loss, tokens, grads = got
    assert tokens == expected[1]
    torch.testing.assert_close(loss, expected[0], **TOLERANCE)
    assert [g is None for g in grads] == [g is None for g in expected[2]]
    for a, b in zip(grads, expected[2]):
        if a is not None:
            torch.testing.assert_close(a, b, **TOLERANCE)


@pytest.mark.slow  # tens of seconds on a busy 2-core machine: three captures of the unrolled decoder
def test_compiled_nmt_step_gives_eager_loss_and_gradients_for_every_shape(make_nmt_batch):
    model = tiny_nmt()
    step = compiled_loss(nmt_loss, "aot_eager")
    # another batch size, source length and target length (the decoder loop compiles again), then the first again
    for src, tgt in [([4, 2, 6], [3, 2, 1]), ([5, 2], [2, 1]), ([4, 2, 6], [3, 2, 1])]:
        batch = make_nmt_batch(src, tgt, seed=len(src) + max(src))
        assert_same(loss_and_grads(step, model, batch), loss_and_grads(nmt_loss, model, batch))


@pytest.mark.slow
def test_compiled_pos_step_gives_eager_loss_and_sparse_gradients(make_pos_batch):
    model = tiny_pos()
    step = compiled_loss(pos_loss, "aot_eager")
    for lengths in ([3, 5, 2], [4, 1], [3, 5, 2]):
        batch = make_pos_batch(lengths, seed=sum(lengths))
        got = loss_and_grads(step, model, batch)
        assert model.word_embedding.weight.grad.is_sparse  # the sparse tables stay sparse under compile
        assert_same(got, loss_and_grads(pos_loss, model, batch))


@pytest.mark.parametrize("multiple", [1, 4, 8])
def test_length_buckets_keep_the_loss_and_gradients(make_nmt_batch, multiple):
    model = tiny_nmt()
    batch = make_nmt_batch([4, 2, 6], [3, 5, 1])  # S = 7, T = 7
    padded = pad_lengths(batch, multiple)
    size = -(-7 // multiple) * multiple
    assert padded["src"].shape == padded["src_mask"].shape == padded["tgt"].shape == (3, size)
    assert torch.equal(padded["src"][:, :7], batch["src"]) and not padded["tgt_mask"][:, 7:].any()
    assert_same(loss_and_grads(nmt_loss, model, padded), loss_and_grads(nmt_loss, model, batch))


def test_length_buckets_refuse_a_multiple_below_one(make_nmt_batch):
    with pytest.raises(ValueError, match="multiple must be >= 1"):
        pad_lengths(make_nmt_batch([2], [2]), 0)


@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_the_padded_losses_compile_whole_and_the_packed_ones_break(make_nmt_batch, make_pos_batch, task):
    """What a compiled run trains (tasks: --compile takes the padded loss, as a graphed one does) traces as one graph:
    no host read, so no graph break and no dynamo warning; the packed loss reads its lengths and breaks."""
    model, loss_fn = (tiny_nmt(), nmt_loss) if task == "nmt" else (tiny_pos(), pos_loss)
    batch = make_nmt_batch([4, 2, 6], [3, 2, 1]) if task == "nmt" else make_pos_batch([3, 5, 2])
    batch["tokens"] = int(batch["tgt_mask"][:, 1:].sum() if task == "nmt" else (batch["tags"] != -100).sum())
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):  # else dynamo leaves nn.GRU/LSTM modules out
        whole = torch.compile(functools.partial(loss_fn, padded=True), fullgraph=True, backend="eager")
        loss, tokens = whole(model, batch)
        with pytest.raises(torch._dynamo.exc.TorchDynamoException):  # a graph break, or a guard on a read value
            torch.compile(loss_fn, fullgraph=True, backend="eager")(model, batch)
    assert tokens == batch["tokens"]
    torch.testing.assert_close(loss, loss_fn(model, batch, padded=True)[0], **TOLERANCE)
