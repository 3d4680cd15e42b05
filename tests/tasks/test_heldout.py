"""tasks.heldout and the tasks' evaluate(): length-sorted, length-capped held-out sets, the seeded periodic sample,
translations back in corpus order, a real long Europarl sentence, and the jobs' periodic versus final evaluation."""
import functools

import numpy as np
import pytest
import torch

from hogwild.data.batching import NmtBatcher, ParallelData
from hogwild.data.moses import tokenize_lines
from hogwild.data.vocab import Vocabulary
from hogwild.models import AttentionNMT, NMTConfig, corpus_bleu, evaluate_pos, heldout_loss, nmt_loss, translate
from hogwild.tasks.heldout import DECODE_MAX_LEN, cap_lengths, nmt_heldout, pos_heldout, sample_rows
from hogwild.tasks.job_builders import build_job
from hogwild.tasks.options import RunOptions


def test_cap_lengths_cuts_both_sides_and_ends_cut_rows_in_eos():
    batch = {"src": torch.tensor([[5, 6, 7, 8, 3], [5, 3, 0, 0, 0]]),
             "tgt": torch.tensor([[2, 5, 6, 7, 8, 3], [2, 9, 3, 0, 0, 0]])}
    capped = cap_lengths(dict(batch, src_mask=batch["src"] != 0, tgt_mask=batch["tgt"] != 0), 2)
    assert capped["src"].tolist() == [[5, 6, 3], [5, 3, 0]]
    assert capped["tgt"].tolist() == [[2, 5, 6, 3], [2, 9, 3, 0]]
    assert capped["tokens"] == 3 + 2  # the host-side count of the cut targets (after bos)
    assert capped["src_mask"].tolist() == [[True, True, True], [True, True, False]]
    assert batch["src"][0, 2] == 7  # the input is not changed


def _parallel(lengths, seed=0):
    """Pairs of random words with these source lengths (targets one word longer), a batcher and the vocabularies."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(20)]
    pairs = [(list(rng.choice(words, n)), list(rng.choice(words, n + 1))) for n in lengths]
    src, tgt = Vocabulary.build(s for s, _ in pairs), Vocabulary.build(t for _, t in pairs)
    return NmtBatcher(ParallelData.tensorize(pairs, src, tgt), 64, shuffle=False), src, tgt


def test_nmt_heldout_sorts_by_length_caps_and_keeps_corpus_positions():
    batcher, _, _ = _parallel([7, 150, 2, 9, 4])
    full = nmt_heldout(batcher, 5, max_len=8, batch_size=2)
    assert full.rows == [0, 1, 2, 3, 4] and full.truncated == 2  # 150 and 9 (targets of 8 words still fit)
    assert [b["index"].tolist() for b in full.batches] == [[2, 4], [0, 3], [1]]  # lengths 2, 4 | 7, 9 | 150
    assert full.batches[2]["src"].shape == (1, 9) and full.batches[2]["src"][0, -1] == 3  # 8 units + eos
    assert all(b["tgt"].shape[1] <= 10 for b in full.batches)
    first = nmt_heldout(batcher, 4)
    assert first.rows == [0, 1, 2, 3] and first.truncated == 1  # 150 > EVAL_MAX_LEN = 100
    assert [b["index"].tolist() for b in first.batches] == [[2, 0, 3, 1]] and first.batches[0]["src"].shape[1] == 101


def test_the_periodic_sample_is_seeded_fixed_and_in_corpus_order():
    rows = sample_rows(100, 10, seed=3)
    assert rows.tolist() == sample_rows(100, 10, seed=3).tolist() == sorted(set(rows.tolist()))
    assert len(rows) == 10 and rows.tolist() != sample_rows(100, 10, seed=4).tolist()
    assert sample_rows(5, 10, seed=0).tolist() == sample_rows(5, None, seed=0).tolist() == [0, 1, 2, 3, 4]


def test_translations_come_back_in_set_order():
    batcher, src, tgt = _parallel([7, 3, 12, 2, 9, 5], seed=1)
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=len(src), tgt_words=len(tgt), embedding=8, hidden=8, attention=8,
                                   readout=8))
    in_order = translate(model, [batcher.batch(np.arange(6))], beam_size=1)
    assert translate(model, nmt_heldout(batcher, 6, batch_size=4).batches, beam_size=1) == in_order
    sample = nmt_heldout(batcher, 6, sample=3, seed=0, batch_size=2)
    assert translate(model, sample.batches, beam_size=1) == [in_order[i] for i in sample.rows]


def test_a_long_europarl_sentence_is_cut_and_its_translation_bounded(corpus):
    folder = corpus("europarl-fr-en")
    fr = (folder / "dev.fr").read_text(encoding="utf-8").splitlines()
    en = (folder / "dev.en").read_text(encoding="utf-8").splitlines()
    longest = max(range(len(fr)), key=lambda i: len(fr[i].split()))
    chosen = [0, longest, 1]
    src_tokens, tgt_tokens = tokenize_lines([fr[i] for i in chosen], "fr"), tokenize_lines([en[i] for i in chosen],
                                                                                           "en")
    assert len(src_tokens[1]) > 120  # the dev set's longest sentence, in Moses tokens
    src, tgt = Vocabulary.build(src_tokens), Vocabulary.build(tgt_tokens)
    batcher = NmtBatcher(ParallelData.tensorize(list(zip(src_tokens, tgt_tokens)), src, tgt), 64, shuffle=False)
    heldout = nmt_heldout(batcher, 3)
    assert heldout.truncated == 1 and heldout.batches[0]["index"].tolist()[-1] == 1  # sorted: the long one last
    assert heldout.batches[0]["src"].shape[1] == 101
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=len(src), tgt_words=len(tgt), embedding=8, hidden=8, attention=8,
                                   readout=8))
    words = translate(model, heldout.batches, beam_size=1, max_len=DECODE_MAX_LEN)
    assert len(words) == 3 and all(len(w) <= min(2 * 101 + 10, DECODE_MAX_LEN) for w in words)
    assert heldout_loss(model, heldout.batches, nmt_loss)["tokens"] == sum(min(len(t), 100) + 1 for t in tgt_tokens)
    assert heldout_loss(model, heldout.batches, functools.partial(nmt_loss, padded=True))["tokens"] == sum(
        min(len(t), 100) + 1 for t in tgt_tokens)  # the host-side count follows the cut


def test_nmt_job_checks_a_sample_periodically_and_everything_at_the_end():
    options = RunOptions(task="nmt", synthetic_size=200, dev_limit=30, eval_sentences=8, seed=2).resolved()
    job = build_job(options)
    from hogwild.tasks.nmt_task import load_data
    task = load_data(options)
    assert job.info["dev_eval_sentences"] == 30 and job.info["dev_periodic_sentences"] == 8
    model = job.model.eval()
    every = task.dev.batch(np.arange(30))
    hypotheses = [task.decode(ids) for ids in translate(model, [every], beam_size=1)]
    final = job.evaluate(model, final=True)
    assert final["bleu"] == corpus_bleu(hypotheses, task.dev_references[:30]).bleu
    assert final["loss"] == pytest.approx(heldout_loss(model, [every], nmt_loss)["loss"], rel=1e-6)  # summed per batch
    rows = sample_rows(30, 8, seed=2).tolist()
    periodic = job.evaluate(model)
    assert periodic["bleu"] == corpus_bleu([hypotheses[i] for i in rows], [task.dev_references[i] for i in rows]).bleu
    assert periodic["loss"] == pytest.approx(heldout_loss(model, [task.dev.batch(np.array(rows))], nmt_loss)["loss"],
                                             rel=1e-6)


def test_pos_job_evaluates_every_dev_sentence_unless_asked_for_a_sample():
    import inspect
    from hogwild.tasks.pos_task import load_data

    options = RunOptions(task="pos", synthetic_size=100).resolved()
    job, task = build_job(options), load_data(options)
    assert list(inspect.signature(job.evaluate).parameters) == ["snapshot"]  # every evaluation competes for best.pt
    expected = evaluate_pos(job.model, task.dev)
    assert job.evaluate(job.model) == expected
    sampled = build_job(RunOptions(task="pos", synthetic_size=100, eval_sentences=20).resolved())
    assert sampled.evaluate(job.model, final=True) == expected
    rows = pos_heldout(task.dev, task.dev.size, sample=20, seed=0).rows
    assert sampled.evaluate(job.model)["tokens"] == float(np.diff(task.dev.data.offsets)[rows].sum())
