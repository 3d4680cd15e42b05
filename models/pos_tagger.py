"""Character-aware BiLSTM POS tagger of the Hogwild paper (Deyringer et al.), and its loss.

A word is represented by [word embedding ; final state of a forward char-LSTM over its suffix ; final state of a
backward char-LSTM over its prefix]. The affixes have a fixed length (10) and are padded as data/features.py says: the
suffix is LEFT-padded, so the forward LSTM reads the pads first and ends on the word's last character; the prefix is
RIGHT-padded and read right-to-left, so the backward LSTM ends on the first character. Both char LSTMs therefore run as
single fused nn.LSTM calls over all words of a batch. A 2-layer bidirectional word LSTM reads the sentence and a
linear layer scores the tags at each position.

Two paths compute the same loss and gradients (tests/models/test_padded_paths.py gives the tolerances):
  - packed (the default, the eager reference): the char LSTMs run over the real tokens only and the word LSTM on
    packed sequences; both need the lengths on the host, so the loss reads them from the device once up front;
  - padded (`pos_loss(..., padded=True)`, `model(..., padded=True)`): the char LSTMs run over every (B, T) position
    and the word LSTM over the padded batch with the lengths kept on the device (models/padded_rnn.py: the backward
    direction reverses each sentence by its own length); padded positions are zeroed before the word LSTM and after
    it and ignored by the loss, which is normalised by a count taken on the device and returns the batch's host-side
    `tokens`. No host read and no data-dependent launch shape: one CUDA graph per padded (B, T) can capture it.
    With dropout between word LSTM layers the two paths draw different masks (packed rows vs padded rows).
A run picks its path per run by the loss it hands the engine: `functools.partial(pos_loss, padded=True)`.

Usage:
    model = POSTagger(pos_preset("small", n_words=len(words), n_chars=len(chars), n_tags=len(tags)))
    loss, n_tokens = pos_loss(model, batch)   # batch: the POS dict of data/batching.py
    loss, n_tokens = pos_loss(model, batch, padded=True)   # the graph-capturable path; needs batch["tokens"]
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .host_fields import host_tokens
from .padded_rnn import full_precision, padded_bidirectional, real_positions
from .special_ids import IGNORE_INDEX, PAD


@dataclass
class POSConfig:
    """Sizes of the POS tagger. Vocabulary sizes include the specials (pad 0, unk 1, bos 2, eos 3)."""

    n_words: int  # word vocabulary size
    n_chars: int  # character vocabulary size
    n_tags: int  # number of tags (tag ids 0 .. n_tags-1; -100 marks padding)
    char_emb: int = 100  # character embedding size (shared by both char LSTMs)
    word_emb: int = 800  # word embedding size
    char_hidden: int = 400  # char-LSTM units per direction
    word_hidden: int = 800  # word BiLSTM units per direction
    word_layers: int = 2  # stacked word BiLSTM layers
    dropout: float = 0.0  # dropout on word representations and between/after word LSTM layers
    sparse_embeddings: bool = False  # sparse gradients for the word and char embedding tables

    def __post_init__(self) -> None:
        for name in ("n_words", "n_chars"):
            if getattr(self, name) < 5:
                raise ValueError(f"POSConfig.{name} must be >= 5 (4 specials + 1 symbol), got {getattr(self, name)}")
        for name in ("n_tags", "char_emb", "word_emb", "char_hidden", "word_hidden", "word_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"POSConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"POSConfig.dropout must be in [0, 1), got {self.dropout}")


def pos_preset(name: str, *, n_words: int, n_chars: int, n_tags: int, **overrides) -> POSConfig:
    """`paper`: the paper's sizes (char emb 100, word emb 800, char LSTM 400, word BiLSTM 800 x 2 layers).
    `small`: a CPU-sized tagger (char emb 32, word emb 128, char LSTM 64, word BiLSTM 128 x 2 layers).
    `overrides` replace single fields, e.g. dropout=0.2."""
    presets = {
        "paper": dict(char_emb=100, word_emb=800, char_hidden=400, word_hidden=800, word_layers=2),
        "small": dict(char_emb=32, word_emb=128, char_hidden=64, word_hidden=128, word_layers=2),
    }
    if name not in presets:
        raise ValueError(f"unknown POS preset {name!r}; choose one of {sorted(presets)}")
    return POSConfig(n_words=n_words, n_chars=n_chars, n_tags=n_tags, **{**presets[name], **overrides})


class POSTagger(nn.Module):
    """Word + char-affix representation -> 2-layer BiLSTM -> linear tag scores."""

    def __init__(self, config: POSConfig):
        super().__init__()
        self.config = c = config
        self.word_embedding = nn.Embedding(c.n_words, c.word_emb, padding_idx=PAD, sparse=c.sparse_embeddings)
        self.char_embedding = nn.Embedding(c.n_chars, c.char_emb, padding_idx=PAD, sparse=c.sparse_embeddings)
        self.suffix_lstm = nn.LSTM(c.char_emb, c.char_hidden, batch_first=True)  # forward, over the suffix
        self.prefix_lstm = nn.LSTM(c.char_emb, c.char_hidden, batch_first=True)  # backward, over the prefix
        self.word_lstm = nn.LSTM(c.word_emb + 2 * c.char_hidden, c.word_hidden, num_layers=c.word_layers,
                                 bidirectional=True, batch_first=True,
                                 dropout=c.dropout if c.word_layers > 1 else 0.0)
        self.dropout = nn.Dropout(c.dropout)
        self.output = nn.Linear(2 * c.word_hidden, c.n_tags)

    def word_representations(self, words: Tensor, prefixes: Tensor, suffixes: Tensor) -> Tensor:
        """words (N,), prefixes (N, L), suffixes (N, L) -> (N, word_emb + 2 * char_hidden)."""
        # The LSTMs run in fp32 under autocast too (padded_rnn.py's docstring says why).
        _, (suffix_state, _) = full_precision(self.suffix_lstm, self.char_embedding(suffixes))  # h_n: (1, N, Hc)
        # Right-padded prefix read right-to-left: pads first, ends on the first character.
        _, (prefix_state, _) = full_precision(self.prefix_lstm, self.char_embedding(prefixes.flip(1)))  # (1, N, Hc)
        return torch.cat([self.word_embedding(words), suffix_state[0], prefix_state[0]], dim=-1)

    def forward(self, words: Tensor, prefixes: Tensor, suffixes: Tensor, lengths: Tensor,
                padded: bool = False) -> Tensor:
        """words (B, T), prefixes/suffixes (B, T, L), lengths (B,) -> tag scores (B, T, n_tags); padded positions
        score the output bias. padded: the graph-capturable path (module docstring), lengths on words' device."""
        if padded:
            return self.forward_padded(words, prefixes, suffixes, lengths)
        batch, steps = words.shape
        host_lengths = lengths.cpu()  # free when the caller passes CPU lengths (pos_loss); else read before compute
        real = torch.arange(steps)[None, :] < host_lengths[:, None]  # (B, T) on the CPU
        # Positions of the real tokens, found on the CPU: a boolean mask on a GPU would wait for the device.
        flat = real.reshape(-1).nonzero().squeeze(1).to(words.device, non_blocking=True)  # (N,)
        affix = prefixes.shape[-1]
        # The char LSTMs run only over real tokens (N = sum of lengths), not over sentence padding.
        reps = self.word_representations(words.reshape(-1)[flat], prefixes.reshape(-1, affix)[flat],
                                         suffixes.reshape(-1, affix)[flat])  # (N, D)
        inputs = reps.new_zeros(batch * steps, reps.shape[-1]).index_copy(0, flat, reps)  # (B * T, D)
        inputs = inputs.view(batch, steps, -1)  # (B, T, D)
        packed = pack_padded_sequence(self.dropout(inputs), host_lengths, batch_first=True, enforce_sorted=False)
        states, _ = full_precision(self.word_lstm, packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=steps)  # (B, T, 2 Hw)
        return self.output(self.dropout(states))  # (B, T, n_tags)

    def forward_padded(self, words: Tensor, prefixes: Tensor, suffixes: Tensor, lengths: Tensor) -> Tensor:
        """forward's scores with no host read: every launch shape is fixed by (B, T, L)."""
        batch, steps = words.shape
        affix = prefixes.shape[-1]
        real = real_positions(lengths, steps)[..., None]  # (B, T, 1) on the device
        reps = self.word_representations(words.reshape(-1), prefixes.reshape(-1, affix),
                                         suffixes.reshape(-1, affix))  # (B * T, D): padding too, fixed shape
        inputs = reps.view(batch, steps, -1).masked_fill(~real, 0.0)  # (B, T, D), zero on padding as packed
        states = padded_bidirectional(self.word_lstm, self.dropout(inputs), lengths)  # (B, T, 2 Hw)
        return self.output(self.dropout(states))  # (B, T, n_tags)

    def score_batch(self, batch: dict[str, Tensor], host_lengths: Tensor | None = None) -> Tensor:
        """Tag scores (B, T, n_tags) for a POS batch (data/batching.py) (host_lengths: its lengths on the CPU, if known)."""
        lengths = batch["lengths"] if host_lengths is None else host_lengths
        return self(batch["words"], batch["prefixes"], batch["suffixes"], lengths)


def pos_loss(model: POSTagger, batch: dict, padded: bool = False) -> tuple[Tensor, int]:
    """Mean tag negative log-likelihood over the real tokens of the batch, and the number of those tokens.
    padded: the graph-capturable path (module docstring): no host read; the count returned is batch["tokens"]."""
    tags = batch["tags"]  # (B, T), -100 at padding
    if padded:
        n_tokens = host_tokens(batch, "POS")
        scores = model(batch["words"], batch["prefixes"], batch["suffixes"], batch["lengths"], padded=True)
        loss = F.cross_entropy(scores.reshape(-1, scores.shape[-1]), tags.reshape(-1), ignore_index=IGNORE_INDEX,
                               reduction="sum")
        # The divisor is counted on the device: a host int would be frozen into a captured graph.
        return loss / (tags != IGNORE_INDEX).sum(), n_tokens
    # The lengths and the token count in one read of the device, before any compute is queued: a read after the
    # forward would stall a GPU's launch queue between forward and backward.
    counts = torch.cat([batch["lengths"].to(tags.device, torch.int64), (tags != IGNORE_INDEX).sum().view(1)]).cpu()
    n_tokens = int(counts[-1])
    if n_tokens == 0:
        raise ValueError("POS batch has no tagged tokens (all tags are -100)")
    scores = model.score_batch(batch, counts[:-1])  # (B, T, n_tags)
    loss = F.cross_entropy(scores.reshape(-1, scores.shape[-1]), tags.reshape(-1), ignore_index=IGNORE_INDEX,
                           reduction="sum")
    return loss / n_tokens, n_tokens
