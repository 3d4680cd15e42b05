"""NMT evaluation: BLEU equals sacreBLEU's own, corpus-order translation, translations file, held-out loss."""
import pytest
import sacrebleu
import torch

from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from hogwild.models.nmt_eval import corpus_bleu, evaluate_nmt, heldout_loss, translate
from hogwild.models.search import beam_search

HYPOTHESES = ["The cat sat on the mat.", "It is raining today in Paris", "Hello world!"]
REFERENCES = ["The cat is sitting on the mat.", "Today it is raining in Paris.", "Hello, world!"]


def test_bleu_of_known_strings_matches_sacrebleu():
    result = corpus_bleu(HYPOTHESES, REFERENCES)
    reference = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert result.bleu == reference.score
    assert 0 < result.bleu < 100 and result.sentences == 3
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result.text == str(reference)
    assert corpus_bleu(REFERENCES, REFERENCES).bleu == pytest.approx(100.0)
    lower = corpus_bleu([h.lower() for h in HYPOTHESES], REFERENCES, lowercase=True)
    assert lower.bleu == sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True).score
    assert "case:lc" in lower.signature


def test_bleu_rejects_length_mismatch():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        corpus_bleu(HYPOTHESES, REFERENCES[:2])


def tiny_model():
    torch.manual_seed(0)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))


def test_translate_restores_corpus_order_from_batch_index(make_nmt_batch):
    model = tiny_model()
    batch = make_nmt_batch([5, 2, 7, 3], [1, 1, 1, 1], seed=3)
    expected = beam_search(model, batch["src"], batch["src_mask"], beam_size=2)
    first = {"src": batch["src"][[2, 0]], "src_mask": batch["src_mask"][[2, 0]], "index": torch.tensor([2, 0])}
    second = {"src": batch["src"][[3, 1]], "src_mask": batch["src_mask"][[3, 1]], "index": torch.tensor([3, 1])}
    assert translate(model, [first, second], beam_size=2) == expected
    with pytest.raises(ValueError, match="appears in two batches"):
        translate(model, [first, first], beam_size=2)
    with pytest.raises(ValueError, match="do not cover"):
        translate(model, [second], beam_size=2)


def test_evaluate_nmt_writes_translations_and_scores_them(make_nmt_batch, tmp_path):
    model = tiny_model()
    batch = make_nmt_batch([5, 2, 7], [1, 1, 1], seed=4)
    decode = lambda ids: " ".join(f"w{i}" for i in ids)  # noqa: E731
    references = ["w5 w6 w7", "w8", "w9 w10"]
    out = tmp_path / "test.hyp"
    result = evaluate_nmt(model, [{"src": batch["src"], "src_mask": batch["src_mask"]}], references, decode,
                          beam_size=1, out_path=out)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert lines == [decode(ids) for ids in translate(model, [batch], beam_size=1)]
    assert result.bleu == sacrebleu.corpus_bleu(lines, [references]).score


def test_heldout_loss_is_token_weighted(make_nmt_batch):
    model = tiny_model()
    a, b = make_nmt_batch([3, 4], [2, 5], seed=1), make_nmt_batch([6], [1], seed=2)
    (la, na), (lb, nb) = nmt_loss(model, a), nmt_loss(model, b)
    model.train()
    metrics = heldout_loss(model, [a, b], nmt_loss)
    assert model.training
    assert metrics["tokens"] == na + nb == 2 + 1 + 5 + 1 + 1 + 1
    assert metrics["loss"] == pytest.approx((la.item() * na + lb.item() * nb) / (na + nb), abs=1e-6)
    assert metrics["perplexity"] == pytest.approx(torch.exp(torch.tensor(metrics["loss"])).item(), rel=1e-5)


def test_evaluation_moves_cpu_batches_to_the_model_device(monkeypatch):
    """Batches follow next(model.parameters()).device (the 'meta' device stands in for a GPU here)."""
    import hogwild.models.nmt_eval as nmt_eval

    model = torch.nn.Linear(2, 2).to("meta")
    batch = {"src": torch.ones(2, 3, dtype=torch.long), "src_mask": torch.ones(2, 3, dtype=torch.bool),
             "tgt": torch.ones(2, 4, dtype=torch.long), "tgt_mask": torch.ones(2, 4, dtype=torch.bool)}
    seen = []

    def loss_fn(m, b):
        seen.append(sorted({v.device.type for v in b.values()}))
        return torch.tensor(2.0), 3

    assert heldout_loss(model, [batch], loss_fn)["loss"] == 2.0 and seen == [["meta"]]

    def greedy(m, src, src_mask, *limits):
        seen.append([src.device.type, src_mask.device.type, *limits])
        return [[4]] * len(src)

    monkeypatch.setattr(nmt_eval, "greedy_search", greedy)
    assert translate(model, [batch], beam_size=1, max_len=7) == [[4], [4]]
    assert seen[-1] == ["meta", "meta", 2.0, 10, 7]
