"""The ids the batch contract reserves, defined once: pad 0, unk 1, bos 2, eos 3, and -100 for tag positions that no
loss or accuracy counts (padding, untagged text).

The models own them because they give the ids meaning (padding_idx of the embeddings, the unknown-word accuracy, the
search's start and stop words, the loss's ignore_index); data/vocab.py imports them to lay out every vocabulary and
data/batching.py to pad batches. This module imports nothing, so data/ depends on this one leaf of models/ and models/
still never imports data/ (docs/architecture.md).

Usage: ``from hogwild.models.special_ids import PAD, EOS``
"""
PAD, UNK, BOS, EOS = 0, 1, 2, 3  # every vocabulary; tag vocabularies hold only pad and unk
IGNORE_INDEX = -100  # tag ids at padded or untagged positions (torch's cross_entropy default ignore_index)
