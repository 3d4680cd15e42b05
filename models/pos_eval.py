"""Evaluation of the POS tagger: token accuracy overall and on unknown words, and tagging of new text.

Unknown words are the tokens whose word id is unk (1): words the vocabulary does not hold (or saw fewer than min_freq
times); the tagger still has their character affixes. Text handling (vocabularies, affix features) belongs to the data
package, so `tag_sentences` takes the encoder and the tag names as arguments.

Usage:
    metrics = evaluate_pos(model, dev_batches)   # {"accuracy": .., "unk_accuracy": .., "tokens": .., "unk_tokens": ..}
    tags = tag_sentences(model, [["The", "dog", "barks"]], encode=encode_sentences, tag_names=tag_vocab.itos)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .host_fields import to_device
from .pos_tagger import POSTagger
from .special_ids import IGNORE_INDEX, UNK


@dataclass
class AccuracyCounts:
    """Running token counts; add batches with `update`, read rates with `metrics`."""

    correct: int = 0
    total: int = 0
    unk_correct: int = 0
    unk_total: int = 0

    def update(self, predicted: Tensor, tags: Tensor, words: Tensor) -> None:
        """predicted, tags, words: (B, T); positions with tag -100 are padding and not counted."""
        real = tags != IGNORE_INDEX
        hit = (predicted == tags) & real
        unknown = (words == UNK) & real
        self.correct += int(hit.sum())
        self.total += int(real.sum())
        self.unk_correct += int((hit & unknown).sum())
        self.unk_total += int(unknown.sum())

    def metrics(self) -> dict[str, float]:
        """accuracy and unk_accuracy in [0, 1] (nan when there is no such token), and the token counts."""
        return {
            "accuracy": self.correct / self.total if self.total else float("nan"),
            "unk_accuracy": self.unk_correct / self.unk_total if self.unk_total else float("nan"),
            "tokens": float(self.total),
            "unk_tokens": float(self.unk_total),
        }


@torch.no_grad()
def predict_tags(model: POSTagger, batch: dict[str, Tensor]) -> Tensor:
    """Most likely tag id at each position: (B, T) on the CPU; padding positions hold -100. The batch is moved to
    the model's device."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        predicted = model.score_batch(to_device(batch, device)).argmax(-1).cpu()
    finally:
        model.train(was_training)
    steps = predicted.shape[1]
    real = torch.arange(steps)[None, :] < batch["lengths"].cpu()[:, None]  # (B, T)
    return predicted.masked_fill(~real, IGNORE_INDEX)


def evaluate_pos(model: POSTagger, batches: Iterable[dict[str, Tensor]]) -> dict[str, float]:
    """Token accuracy over all tagged tokens of `batches`, and over the unknown-word tokens among them."""
    counts = AccuracyCounts()
    for batch in batches:
        counts.update(predict_tags(model, batch), batch["tags"], batch["words"])
    if counts.total == 0:
        raise ValueError("evaluate_pos: the evaluation batches hold no tagged token")
    return counts.metrics()


def tag_sentences(model: POSTagger, sentences: Sequence[Sequence[str]],
                  encode: Callable[[Sequence[Sequence[str]]], dict[str, Tensor]],
                  tag_names: Sequence[str], batch_size: int = 32) -> list[list[str]]:
    """Tag tokenized sentences. `encode(sentences)` returns a POS batch (words, prefixes, suffixes, lengths; tags
    are not needed) for those sentences in order; `tag_names[i]` is the name of tag id i."""
    tagged: list[list[str]] = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        batch = encode(chunk)
        predicted = predict_tags(model, batch)
        for row, sentence in zip(predicted.tolist(), chunk):
            tagged.append([tag_names[t] for t in row[:len(sentence)]])
    return tagged
