"""The models learn the data package's synthetic tasks through the real pipeline (vocabularies, affix features,
batchers, detokenizer): POS accuracy on unknown words proves the char features work; NMT BLEU proves training,
search and scoring fit together."""
import pytest
import torch

from hogwild.data.nmt_dataset import synthetic_nmt_dataset
from hogwild.data.pos_dataset import synthetic_pos_dataset
from hogwild.models import (AttentionNMT, NMTConfig, POSConfig, POSTagger, evaluate_nmt, evaluate_pos, nmt_loss, pos_loss,
                    tag_sentences)
from hogwild.feed.tickets import epoch_order


def fit(model, loss_fn, batcher, epochs, lr=0.01):
    """The serial loop in the engine's order: the batcher's fixed batches, reordered each epoch by epoch_order."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batches = batcher.batches()
    for epoch in range(epochs):
        for index in epoch_order(len(batches), 0, epoch, shuffle=True):
            batch = batches[int(index)]
            optimizer.zero_grad()
            loss_fn(model, batch)[0].backward()
            optimizer.step()


@pytest.mark.slow
def test_pos_tagger_learns_suffix_driven_tags_of_unknown_words():
    task = synthetic_pos_dataset(num_train=1000, num_dev=200, batch_size=16)
    assert task.info["dev_unk_word_rate"] > 0.5  # most open-class words are unk: only char features can tag them
    torch.manual_seed(0)
    model = POSTagger(POSConfig(n_words=len(task.words), n_chars=len(task.chars), n_tags=len(task.tags),
                                char_emb=16, word_emb=16, char_hidden=24, word_hidden=24, word_layers=1))
    before = evaluate_pos(model, task.dev)
    fit(model, pos_loss, task.train, epochs=2)
    after = evaluate_pos(model, task.dev)
    assert before["accuracy"] < 0.5
    assert after["accuracy"] >= 0.97 and after["unk_accuracy"] >= 0.95

    def encode(sentences):
        from hogwild.data.batching import PosBatcher, TaggedData
        tagged = [[(w, task.tags.itos[4]) for w in s] for s in sentences]
        data = TaggedData.tensorize(tagged, task.words, task.chars, task.tags, 10)
        return PosBatcher(data, batch_size=len(sentences), shuffle=False).batch(list(range(len(sentences))))

    assert tag_sentences(model, [["ta", "bokazor", "mifelat"]], encode, task.tags.itos) == [["DET", "NOUN", "VERB"]]


@pytest.mark.slow
def test_nmt_learns_the_synthetic_translation_task():
    task = synthetic_nmt_dataset(num_train=2000, num_dev=100, batch_size=32)
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=len(task.src_vocab), tgt_words=len(task.tgt_vocab), embedding=32,
                                   hidden=64, attention=64, readout=32))
    fit(model, nmt_loss, task.train, epochs=2)
    greedy = evaluate_nmt(model, task.dev, task.dev_references, task.decode, beam_size=1)
    beam = evaluate_nmt(model, task.dev, task.dev_references, task.decode, beam_size=3)
    assert greedy.bleu >= 80 and beam.bleu >= 80
