"""AttentionNMT and nmt_loss: shapes, masking invariance, overfitting, presets, attention masking, sparse gradients."""
import pytest
import torch

from hogwild.models.attention import AdditiveAttention
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss, nmt_preset


def tiny_nmt(seed=0, **overrides):
    torch.manual_seed(seed)
    sizes = dict(embedding=12, hidden=16, attention=14, readout=10)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, **{**sizes, **overrides}))


def test_logits_and_encoder_shapes(make_nmt_batch):
    model = tiny_nmt()
    batch = make_nmt_batch([4, 2, 6], [3, 5, 1])
    encoded = model.encode(batch["src"], batch["src_mask"])
    assert encoded.annotations.shape == (3, 7, 32) and encoded.keys.shape == (3, 7, 14)
    assert encoded.initial_state.shape == (3, 16)
    assert (encoded.annotations[~batch["src_mask"]] == 0).all()
    assert model(batch["src"], batch["src_mask"], batch["tgt"][:, :-1]).shape == (3, 6, 25)
    loss, tokens = nmt_loss(model, batch)
    assert tokens == (3 + 1) + (5 + 1) + (1 + 1)  # words + eos per sentence
    assert loss.dim() == 0 and loss.item() > 0


def test_extra_padding_does_not_change_loss_or_gradients(make_nmt_batch):
    model = tiny_nmt()
    tight = make_nmt_batch([4, 2, 6], [3, 5, 1])
    padded = make_nmt_batch([4, 2, 6], [3, 5, 1], extra_pad=4)
    assert padded["src"].shape == (3, 11) and torch.equal(padded["src"][:, :7], tight["src"])
    loss_tight, n_tight = nmt_loss(model, tight)
    grads_tight = torch.autograd.grad(loss_tight, list(model.parameters()))
    loss_padded, n_padded = nmt_loss(model, padded)
    grads_padded = torch.autograd.grad(loss_padded, list(model.parameters()))
    assert n_tight == n_padded
    torch.testing.assert_close(loss_padded, loss_tight, rtol=0, atol=1e-6)
    for a, b in zip(grads_tight, grads_padded):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_batched_loss_is_token_weighted_mean_of_single_pairs(make_nmt_batch):
    model = tiny_nmt()
    batch = make_nmt_batch([4, 2, 6], [3, 5, 1], seed=5)
    loss, tokens = nmt_loss(model, batch)
    total = 0.0
    for b in range(3):
        s, t = int(batch["src_mask"][b].sum()), int(batch["tgt_mask"][b].sum())
        single = {"src": batch["src"][b:b + 1, :s], "src_mask": batch["src_mask"][b:b + 1, :s],
                  "tgt": batch["tgt"][b:b + 1, :t], "tgt_mask": batch["tgt_mask"][b:b + 1, :t]}
        single_loss, n = nmt_loss(model, single)
        total += single_loss.item() * n
    assert loss.item() == pytest.approx(total / tokens, abs=1e-6)


def test_attention_gives_padding_zero_weight():
    torch.manual_seed(0)
    attention = AdditiveAttention(query_size=5, key_size=6, attention_size=4)
    annotations = torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    context, weights = attention(torch.randn(2, 5), attention.project_keys(annotations), annotations, mask)
    assert (weights[0, 2:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    torch.testing.assert_close(context, torch.einsum("bs,bsk->bk", weights, annotations))


def test_overfits_a_tiny_batch(make_nmt_batch):
    model = tiny_nmt(seed=2, hidden=24)
    batch = make_nmt_batch([5, 3, 4, 6], [4, 6, 3, 5], seed=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(200):
        optimizer.zero_grad()
        loss, _ = nmt_loss(model, batch)
        loss.backward()
        optimizer.step()
    assert nmt_loss(model, batch)[0].item() < 0.02


def test_paper_preset_parameter_count():
    model = AttentionNMT(nmt_preset("paper"))
    c = model.config
    assert (c.src_words, c.tgt_words, c.embedding, c.hidden) == (15_000, 15_000, 100, 1000)
    gru = lambda inp, hid: 3 * hid * (inp + hid) + 6 * hid  # noqa: E731 (weights + two bias vectors)
    expected = (2 * 15_000 * 100                      # embeddings
                + 2 * gru(100, 1000)                   # bidirectional encoder
                + 2000 * 1000 + 1000                   # initial state
                + 2000 * 2000 + 2000 + 1000 * 2000 + 2000  # attention: keys, query, energy
                + gru(100 + 2000, 1000)                # decoder cell
                + 3100 * 100 + 100                     # deep output
                + 100 * 15_000 + 15_000)               # softmax projection
    assert expected == 28_748_100
    assert sum(p.numel() for p in model.parameters()) == expected


def test_small_preset_and_bad_configs():
    config = nmt_preset("small", src_words=8000, tgt_words=9000)
    assert (config.src_words, config.tgt_words, config.hidden, config.embedding) == (8000, 9000, 256, 128)
    with pytest.raises(ValueError, match="unknown NMT preset"):
        nmt_preset("tiny")
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        NMTConfig(src_words=10, tgt_words=10, hidden=0)
    with pytest.raises(ValueError, match="tgt_words must be >= 5"):
        NMTConfig(src_words=10, tgt_words=4)


def test_sparse_embedding_gradients(make_nmt_batch):
    model = tiny_nmt(sparse_embeddings=True)
    batch = make_nmt_batch([3, 2], [2, 4])
    nmt_loss(model, batch)[0].backward()
    grad = model.src_embedding.weight.grad
    assert grad.is_sparse and model.tgt_embedding.weight.grad.is_sparse
    assert set(grad.coalesce().indices()[0].tolist()) == set(batch["src"][batch["src_mask"]].tolist())


def test_empty_source_is_rejected(make_nmt_batch):
    batch = make_nmt_batch([3], [2])
    batch["src_mask"][:] = False
    with pytest.raises(ValueError, match="empty source sentence"):
        nmt_loss(tiny_nmt(), batch)
