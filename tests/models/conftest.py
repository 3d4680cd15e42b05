"""Seeded random batches in the formats of data/batching.py, for the model tests."""
import pytest
import torch

AFFIX = 10


def pos_batch(lengths, n_words=30, n_chars=20, n_tags=7, extra_pad=0, seed=0):
    """A POS batch of sentences with the given lengths, padded to max(lengths) + extra_pad."""
    g = torch.Generator().manual_seed(seed)
    batch, steps = len(lengths), max(lengths) + extra_pad
    words = torch.zeros(batch, steps, dtype=torch.long)
    prefixes = torch.zeros(batch, steps, AFFIX, dtype=torch.long)
    suffixes = torch.zeros(batch, steps, AFFIX, dtype=torch.long)
    tags = torch.full((batch, steps), -100, dtype=torch.long)
    for b, n in enumerate(lengths):
        words[b, :n] = torch.randint(1, n_words, (n,), generator=g)
        tags[b, :n] = torch.randint(0, n_tags, (n,), generator=g)
        for t in range(n):
            k = int(torch.randint(1, AFFIX + 1, (1,), generator=g))
            chars = torch.randint(4, n_chars, (k,), generator=g)
            prefixes[b, t, :k] = chars  # right-padded
            suffixes[b, t, AFFIX - k:] = chars  # left-padded
    return {"words": words, "prefixes": prefixes, "suffixes": suffixes, "tags": tags,
            "lengths": torch.tensor(lengths, dtype=torch.long)}


def nmt_batch(src_lengths, tgt_lengths, src_words=25, tgt_words=25, extra_pad=0, seed=0):
    """An NMT batch; lengths count the real words (eos, and bos for the target, are added)."""
    g = torch.Generator().manual_seed(seed)
    batch = len(src_lengths)
    s_max, t_max = max(src_lengths) + 1 + extra_pad, max(tgt_lengths) + 2 + extra_pad
    src = torch.zeros(batch, s_max, dtype=torch.long)
    tgt = torch.zeros(batch, t_max, dtype=torch.long)
    for b, (n, m) in enumerate(zip(src_lengths, tgt_lengths)):
        src[b, :n] = torch.randint(4, src_words, (n,), generator=g)
        src[b, n] = 3
        tgt[b, 0] = 2
        tgt[b, 1:m + 1] = torch.randint(4, tgt_words, (m,), generator=g)
        tgt[b, m + 1] = 3
    return {"src": src, "src_mask": src != 0, "tgt": tgt, "tgt_mask": tgt != 0}


@pytest.fixture
def make_pos_batch():
    return pos_batch


@pytest.fixture
def make_nmt_batch():
    return nmt_batch
