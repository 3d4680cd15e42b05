"""POS evaluation: accuracy counting on a hand-made example, evaluate_pos over batches, tagging new text."""
import math

import pytest
import torch

from hogwild.models.pos_eval import AccuracyCounts, evaluate_pos, predict_tags, tag_sentences
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss


def test_accuracy_counts_hand_made_example():
    # sentence 1: 4 tokens, word 1 (unk) at positions 1 and 3; sentence 2: 2 tokens + 2 padding positions
    words = torch.tensor([[5, 1, 7, 1], [1, 9, 0, 0]])
    tags = torch.tensor([[2, 3, 4, 5], [6, 2, -100, -100]])
    predicted = torch.tensor([[2, 3, 0, 1], [6, 0, 7, 7]])  # padding predictions must not count
    counts = AccuracyCounts()
    counts.update(predicted, tags, words)
    assert (counts.correct, counts.total, counts.unk_correct, counts.unk_total) == (3, 6, 2, 3)
    metrics = counts.metrics()
    assert metrics == {"accuracy": 0.5, "unk_accuracy": 2 / 3, "tokens": 6.0, "unk_tokens": 3.0}
    counts.update(torch.tensor([[4]]), torch.tensor([[4]]), torch.tensor([[8]]))
    assert counts.metrics()["accuracy"] == 4 / 7 and counts.metrics()["unk_accuracy"] == 2 / 3


def test_no_unknown_words_gives_nan_unk_accuracy():
    counts = AccuracyCounts()
    counts.update(torch.tensor([[1]]), torch.tensor([[1]]), torch.tensor([[5]]))
    assert counts.metrics()["accuracy"] == 1.0 and math.isnan(counts.metrics()["unk_accuracy"])


def trained_tagger(batch):
    torch.manual_seed(0)
    model = POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=8, word_emb=12, char_hidden=10,
                                word_hidden=14))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        optimizer.zero_grad()
        pos_loss(model, batch)[0].backward()
        optimizer.step()
    return model


def test_evaluate_pos_matches_manual_count_and_keeps_training_mode(make_pos_batch):
    batch = make_pos_batch([6, 3, 4], seed=2)
    model = trained_tagger(batch)
    model.train()
    metrics = evaluate_pos(model, [batch])
    assert model.training
    assert metrics["accuracy"] == 1.0 and metrics["tokens"] == 13.0
    other = make_pos_batch([5, 5], seed=9)
    predicted = predict_tags(model, other)
    assert (predicted[other["tags"] == -100] == -100).all()
    hits = int(((predicted == other["tags"]) & (other["tags"] != -100)).sum())
    assert evaluate_pos(model, [other])["accuracy"] == hits / 10


def test_tag_sentences_uses_encoder_and_tag_names(make_pos_batch):
    batch = make_pos_batch([3, 2], seed=4)
    model = trained_tagger(batch)
    names = [f"T{i}" for i in range(7)]
    calls = []

    def encode(sentences):
        calls.append([list(s) for s in sentences])
        rows = [0, 1][:len(sentences)] if len(calls) == 1 else [1]
        return {k: v[rows] for k, v in batch.items()}

    tagged = tag_sentences(model, [["a", "b", "c"], ["d", "e"]], encode, names, batch_size=2)
    gold = batch["tags"]
    assert tagged == [[names[t] for t in gold[0, :3].tolist()], [names[t] for t in gold[1, :2].tolist()]]
    assert calls == [[["a", "b", "c"], ["d", "e"]]]


def test_evaluate_pos_rejects_empty_input():
    model = POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=4, char_hidden=4,
                                word_hidden=4))
    with pytest.raises(ValueError, match="no tagged token"):
        evaluate_pos(model, [])


def test_tags_are_predicted_on_the_model_device_and_counted_on_the_cpu(make_pos_batch):
    """predict_tags moves the batch to the model's device ('meta' stands in for a GPU) and returns CPU tags."""
    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))
            self.devices = []

        def score_batch(self, batch):
            self.devices.append(sorted({v.device.type for v in batch.values()}))
            scores = torch.zeros(*batch["words"].shape, 7)
            scores[..., 2] = 1.0  # always tag 2
            return scores

    batch = make_pos_batch([3, 1])
    model = Recorder()
    metrics = evaluate_pos(model, [batch])
    real = batch["tags"] != -100
    assert model.devices == [["meta"]]
    assert metrics["accuracy"] == float((batch["tags"][real] == 2).float().mean())
