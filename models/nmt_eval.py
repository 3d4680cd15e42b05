"""Evaluation of the NMT model: translate a corpus (greedy or beam search), detokenize, score with sacreBLEU, and save
the translations. Text handling (vocabulary, subwords, Moses detokenization) belongs to the data package, so
`evaluate_nmt` takes a `decode(word_ids) -> str` callable that returns detokenized text.

Usage:
    result = evaluate_nmt(model, test_batches, references, decode=to_text, beam_size=5, out_path="test.hyp")
    print(result.bleu, result.signature)   # e.g. 21.3 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0'
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .host_fields import to_device
from .nmt import AttentionNMT
from .search import beam_search, greedy_search


@dataclass
class BleuResult:
    bleu: float  # corpus BLEU, 0..100
    signature: str  # sacreBLEU signature of the settings that produced it
    text: str  # sacreBLEU's one-line summary (n-gram precisions, brevity penalty, lengths)
    sentences: int  # number of hypothesis/reference pairs


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a",
                lowercase: bool = False) -> BleuResult:
    """sacreBLEU corpus BLEU of detokenized hypotheses against one detokenized reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} hypotheses but {len(references)} references")
    import sacrebleu  # here: its import costs a run.py start (and each spawned worker's) 0.1-0.2 s, most never scoring
    metric = sacrebleu.metrics.BLEU(tokenize=tokenize, lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return BleuResult(score.score, str(metric.get_signature()), str(score), len(hypotheses))


def translate(model: AttentionNMT, batches: Iterable[dict[str, Tensor]], beam_size: int = 5,
              length_penalty: float = 1.0, max_len_a: float = 2.0, max_len_b: int = 10,
              max_len: int | None = None) -> list[list[int]]:
    """Word ids of the translation of every source sentence, in corpus order. beam_size 1 means greedy search;
    each translation has at most min(max_len_a * source length + max_len_b, max_len) words (search.py). Batches go to
    the model's device. A batch may carry "index" (B,) with the corpus position of each row (for length-sorted
    batches); without it the rows are taken to follow each other in corpus order."""
    found: dict[int, list[int]] = {}
    next_position = 0
    device = next(model.parameters()).device
    for batch in batches:
        src, src_mask = batch["src"].to(device), batch["src_mask"].to(device)
        if beam_size == 1:
            hypotheses = greedy_search(model, src, src_mask, max_len_a, max_len_b, max_len)
        else:
            hypotheses = beam_search(model, src, src_mask, beam_size, length_penalty, max_len_a, max_len_b, max_len)
        positions = batch["index"].tolist() if "index" in batch else range(next_position, next_position + len(src))
        next_position += len(src)
        for position, words in zip(positions, hypotheses):
            if position in found:
                raise ValueError(f"translate: corpus position {position} appears in two batches")
            found[position] = words
    if sorted(found) != list(range(len(found))):
        raise ValueError("translate: batch indices do not cover 0 .. n-1 exactly once")
    return [found[i] for i in range(len(found))]


def evaluate_nmt(model: AttentionNMT, batches: Iterable[dict[str, Tensor]], references: Sequence[str],
                 decode: Callable[[list[int]], str], beam_size: int = 5, length_penalty: float = 1.0,
                 out_path: str | Path | None = None, max_len_a: float = 2.0, max_len_b: int = 10,
                 max_len: int | None = None) -> BleuResult:
    """Translate `batches`, turn ids into detokenized text with `decode`, write one translation per line to
    `out_path` (if given) and score them against `references` (detokenized, corpus order) with sacreBLEU."""
    hypotheses = [decode(words) for words in translate(model, batches, beam_size, length_penalty, max_len_a,
                                                       max_len_b, max_len)]
    if out_path is not None:
        Path(out_path).write_text("".join(h.replace("\n", " ") + "\n" for h in hypotheses), encoding="utf-8")
    return corpus_bleu(hypotheses, references)


@torch.no_grad()
def heldout_loss(model: torch.nn.Module, batches: Iterable[dict[str, Tensor]],
                 loss_fn: Callable[[torch.nn.Module, dict[str, Tensor]], tuple[Tensor, int]]) -> dict[str, float]:
    """Token-weighted mean loss of `loss_fn` over `batches` (moved to the model's device) in eval mode, and its
    perplexity."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    try:
        for batch in batches:
            loss, n = loss_fn(model, to_device(batch, device))
            total += float(loss) * n
            tokens += n
    finally:
        model.train(was_training)
    if tokens == 0:
        raise ValueError("heldout_loss: no tokens in the evaluation batches")
    mean = total / tokens
    return {"loss": mean, "perplexity": math.exp(min(mean, 700.0)), "tokens": float(tokens)}
