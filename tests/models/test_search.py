"""Greedy and beam search: beam 1 == greedy, batch independence, recovery of memorised translations, and the exact
choices of beam search with and without length normalisation on a scripted model."""
import math

import pytest
import torch
from torch import nn

from hogwild.models.nmt import AttentionNMT, EncoderOutput, NMTConfig, nmt_loss
from hogwild.models.special_ids import EOS
from hogwild.models.search import _max_steps, beam_search, greedy_search


def train_tiny(batch, steps=200):
    torch.manual_seed(2)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=12, hidden=24, attention=14, readout=10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(steps):
        optimizer.zero_grad()
        nmt_loss(model, batch)[0].backward()
        optimizer.step()
    return model


def gold_words(batch):
    return [row[1:row.index(EOS)] for row in batch["tgt"].tolist()]


def test_memorised_targets_are_recovered_and_beam1_equals_greedy(make_nmt_batch):
    batch = make_nmt_batch([5, 3, 4, 6], [4, 6, 3, 5], seed=2)
    model = train_tiny(batch)
    gold = gold_words(batch)
    assert greedy_search(model, batch["src"], batch["src_mask"]) == gold
    assert beam_search(model, batch["src"], batch["src_mask"], beam_size=1) == gold
    assert beam_search(model, batch["src"], batch["src_mask"], beam_size=4) == gold


def test_beam1_equals_greedy_on_an_untrained_model(make_nmt_batch):
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    batch = make_nmt_batch([5, 1, 7, 3], [1, 1, 1, 1], seed=7)
    greedy = greedy_search(model, batch["src"], batch["src_mask"], max_len_a=1.0, max_len_b=3)
    assert beam_search(model, batch["src"], batch["src_mask"], beam_size=1, max_len_a=1.0, max_len_b=3) == greedy
    assert max(len(h) for h in greedy) <= 8 + 3  # longest source (7 words + eos) * 1.0 + 3


def test_batched_beam_search_equals_one_sentence_at_a_time(make_nmt_batch):
    torch.manual_seed(1)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    batch = make_nmt_batch([5, 2, 7], [1, 1, 1], seed=3)
    together = beam_search(model, batch["src"], batch["src_mask"], beam_size=3, max_len_b=4)
    for b in range(3):
        n = int(batch["src_mask"][b].sum())
        alone = beam_search(model, batch["src"][b:b + 1, :n], batch["src_mask"][b:b + 1, :n], beam_size=3,
                            max_len_b=4)
        assert alone == [together[b]]


class ScriptedModel(nn.Module):
    """Word 4 ('a') or eos. First step: p(a) = 0.6, p(eos) = 0.4. Later steps: p(eos) = 0.5, p(a) = 0.3,
    p(unk) = 0.2. The state counts the steps taken."""

    def __init__(self):
        super().__init__()
        self.config = NMTConfig(src_words=5, tgt_words=5, embedding=1, hidden=1, attention=1, readout=1)

    def encode(self, src, src_mask):
        rows = src.shape[0]
        return EncoderOutput(torch.zeros(rows, 1, 2), torch.zeros(rows, 1, 1), src_mask, torch.zeros(rows, 1))

    def decode_step(self, previous, state, encoded):
        first = torch.log(torch.tensor([1e-9, 1e-9, 1e-9, 0.4, 0.6]))
        later = torch.log(torch.tensor([1e-9, 0.2, 1e-9, 0.5, 0.3]))
        table = torch.where(state == 0, first, later)  # (R, V)
        return table, state + 1


def test_length_normalisation_decides_between_finished_hypotheses():
    model = ScriptedModel()
    src, mask = torch.tensor([[4, EOS]]), torch.tensor([[True, True]])
    # "eos": log 0.4 = -0.916 (length 1);  "a eos": log 0.6 + log 0.5 = -1.204 (length 2, -0.602 per word)
    assert beam_search(model, src, mask, beam_size=2, length_penalty=0.0) == [[]]
    assert beam_search(model, src, mask, beam_size=2, length_penalty=1.0) == [[4]]
    assert greedy_search(model, src, mask) == [[4]]  # a (0.6), then eos (0.5)
    assert math.log(0.6) + math.log(0.5) < math.log(0.4) < (math.log(0.6) + math.log(0.5)) / 2


def test_bad_search_arguments():
    model = ScriptedModel()
    src, mask = torch.tensor([[4, EOS]]), torch.tensor([[True, True]])
    with pytest.raises(ValueError, match="beam_size must be in"):
        beam_search(model, src, mask, beam_size=0)
    with pytest.raises(ValueError, match="length_penalty must be >= 0"):
        beam_search(model, src, mask, beam_size=2, length_penalty=-1.0)


def test_max_len_bounds_a_long_sentence_and_the_batch_stops_with_it(make_nmt_batch):
    """A 400-word source would allow 2 * 401 + 10 = 812 steps; max_len caps every sentence (and so the batch)."""
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    batch = make_nmt_batch([400, 4], [1, 1], seed=5)
    steps = []
    decode_step = model.decode_step

    def counted(*args):
        steps.append(1)
        return decode_step(*args)

    model.decode_step = counted
    assert _max_steps(batch["src_mask"], 2.0, 10).tolist() == [812, 20]
    assert _max_steps(batch["src_mask"], 2.0, 10, max_len=15).tolist() == [15, 15]
    for search in (greedy_search, lambda m, s, k, **kw: beam_search(m, s, k, beam_size=3, **kw)):
        steps.clear()
        capped = search(model, batch["src"], batch["src_mask"], max_len=15)
        assert len(steps) <= 15 and all(len(words) <= 15 for words in capped)
        alone = search(model, batch["src"][1:, :5], batch["src_mask"][1:, :5], max_len=15)
        assert capped[1] == alone[0]  # the short sentence's translation does not depend on the long one
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        greedy_search(model, batch["src"], batch["src_mask"], max_len=0)
