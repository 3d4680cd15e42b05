"""POSTagger and pos_loss: shapes, masking invariance, overfitting, presets, sparse gradients, config checks."""
import pytest
import torch

from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss, pos_preset


def tiny_tagger(seed=0, **overrides):
    torch.manual_seed(seed)
    sizes = dict(char_emb=8, word_emb=12, char_hidden=10, word_hidden=14, word_layers=2)
    return POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, **{**sizes, **overrides}))


def test_scores_shape_and_token_count(make_pos_batch):
    model = tiny_tagger()
    batch = make_pos_batch([5, 3, 1])
    assert model.score_batch(batch).shape == (3, 5, 7)
    loss, tokens = pos_loss(model, batch)
    assert tokens == 9
    assert loss.dim() == 0 and loss.item() > 0


def test_extra_padding_does_not_change_loss_or_gradients(make_pos_batch):
    model = tiny_tagger()
    tight, padded = make_pos_batch([6, 2, 4]), make_pos_batch([6, 2, 4], extra_pad=5)
    assert padded["words"].shape == (3, 11)
    loss_tight, n_tight = pos_loss(model, tight)
    grads_tight = torch.autograd.grad(loss_tight, list(model.parameters()))
    loss_padded, n_padded = pos_loss(model, padded)
    grads_padded = torch.autograd.grad(loss_padded, list(model.parameters()))
    assert n_tight == n_padded == 12
    torch.testing.assert_close(loss_padded, loss_tight, rtol=0, atol=1e-6)
    for a, b in zip(grads_tight, grads_padded):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_batched_loss_is_token_weighted_mean_of_single_sentences(make_pos_batch):
    model = tiny_tagger()
    batch = make_pos_batch([6, 2, 4], seed=3)
    loss, tokens = pos_loss(model, batch)
    total = 0.0
    for b in range(3):
        n = int(batch["lengths"][b])
        single = {k: v[b:b + 1, :n] if k != "lengths" else v[b:b + 1] for k, v in batch.items()}
        single_loss, single_tokens = pos_loss(model, single)
        assert single_tokens == n
        total += single_loss.item() * n
    assert loss.item() == pytest.approx(total / tokens, abs=1e-6)


def test_overfits_a_tiny_batch(make_pos_batch):
    model = tiny_tagger(seed=1)
    batch = make_pos_batch([7, 5, 3], seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        optimizer.zero_grad()
        loss, _ = pos_loss(model, batch)
        loss.backward()
        optimizer.step()
    assert pos_loss(model, batch)[0].item() < 0.02


def test_char_lstms_end_on_the_word_edges():
    """The suffix LSTM reads the left-padded suffix left to right and ends on the LAST char; the prefix LSTM reads the
    right-padded prefix right to left and ends on the FIRST char (the padding of data/features.py)."""
    model = tiny_tagger()
    prefix = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0, 0, 0]])  # "abc" right-padded
    suffix = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 5, 6, 7]])  # "abc" left-padded
    reps = model.word_representations(torch.tensor([4]), prefix, suffix)  # (1, 12 + 10 + 10)
    with torch.no_grad():
        suffix_outputs, _ = model.suffix_lstm(model.char_embedding(suffix))  # (1, 10, 10), step 9 reads "c"
        prefix_outputs, _ = model.prefix_lstm(model.char_embedding(torch.tensor([[0] * 7 + [7, 6, 5]])))  # ends on "a"
    torch.testing.assert_close(reps[:, :12], model.word_embedding(torch.tensor([4])))
    torch.testing.assert_close(reps[:, 12:22], suffix_outputs[:, -1])
    torch.testing.assert_close(reps[:, 22:], prefix_outputs[:, -1])


def test_paper_preset_parameter_count():
    model = POSTagger(pos_preset("paper", n_words=10_000, n_chars=100, n_tags=50))
    c = model.config
    assert (c.char_emb, c.word_emb, c.char_hidden, c.word_hidden, c.word_layers) == (100, 800, 400, 800, 2)
    lstm = lambda inp, hid: 4 * hid * (inp + hid) + 8 * hid  # noqa: E731 (weights + two bias vectors)
    expected = (10_000 * 800 + 100 * 100 + 2 * lstm(100, 400)
                + 2 * lstm(800 + 2 * 400, 800) + 2 * lstm(2 * 800, 800) + 2 * 800 * 50 + 50)
    assert expected == 40_442_050
    assert sum(p.numel() for p in model.parameters()) == expected


def test_small_preset_and_overrides():
    config = pos_preset("small", n_words=100, n_chars=50, n_tags=10, dropout=0.25)
    assert (config.word_emb, config.char_hidden, config.word_hidden, config.dropout) == (128, 64, 128, 0.25)
    with pytest.raises(ValueError, match="unknown POS preset 'huge'"):
        pos_preset("huge", n_words=100, n_chars=50, n_tags=10)


@pytest.mark.parametrize("field,value,message", [
    ("n_words", 3, "n_words must be >= 5"), ("n_tags", 0, "n_tags must be >= 1"),
    ("word_layers", 0, "word_layers must be >= 1"), ("dropout", 1.0, r"dropout must be in \[0, 1\)"),
])
def test_config_rejects_bad_values(field, value, message):
    fields = dict(n_words=30, n_chars=20, n_tags=7)
    fields[field] = value
    with pytest.raises(ValueError, match=message):
        POSConfig(**fields)


def test_sparse_embedding_gradients_touch_only_used_rows(make_pos_batch):
    model = tiny_tagger(sparse_embeddings=True)
    batch = make_pos_batch([4, 2])
    pos_loss(model, batch)[0].backward()
    grad = model.word_embedding.weight.grad
    assert grad.is_sparse
    used = set(batch["words"][batch["words"] != 0].tolist())
    assert set(grad.coalesce().indices()[0].tolist()) == used
    assert model.char_embedding.weight.grad.is_sparse


def test_batch_without_tags_is_rejected(make_pos_batch):
    batch = make_pos_batch([2])
    batch["tags"][:] = -100
    with pytest.raises(ValueError, match="no tagged tokens"):
        pos_loss(tiny_tagger(), batch)
