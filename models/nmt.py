"""dl4mt-style attention NMT (Bahdanau et al. 2015): bidirectional GRU encoder, GRU decoder with additive attention,
initial decoder state from the mean encoder state, deep output layer before the softmax; and its loss.

Decoder step i (teacher forcing feeds y_{i-1} = tgt[:, i-1]):
    c_i = attention(s_{i-1}, h)                      additive attention over the annotations h (padding masked)
    s_i = GRUCell([E y_{i-1} ; c_i], s_{i-1})
    t_i = tanh(W_s s_i + W_y E y_{i-1} + W_c c_i)    deep output (readout) layer, as dl4mt's ff_logit_* layers
    p(y_i) = softmax(W_o t_i)
The encoder is one fused, packed nn.GRU call. The decoder loop only runs the attention and the fused GRUCell; the
readout and the softmax projection run once over all steps after the loop. s_0 = tanh(W_init mean_j h_j).

Two paths compute the same loss and gradients (tests/models/test_padded_paths.py gives the tolerances):
  - packed (the default, the eager reference): the encoder runs on packed sequences, which need the source lengths
    on the host, so the loss reads them from the device once before its first kernel;
  - padded (`nmt_loss(..., padded=True)`, `model(..., padded=True)`): the encoder runs over the whole padded (B, S)
    with the lengths kept on the device (models/padded_rnn.py: the backward direction reverses each sentence by its
    own length), the mean and the attention mask the padding, the loss is normalised by a token count taken on the
    device, and the count it returns is the batch's host-side `tokens`. No host read and no data-dependent launch
    shape: one CUDA graph per padded (B, S, T) can capture it. The decoder loop is the same in both (it already runs
    every padded target step and the loss masks them).
A run picks its path per run by the loss it hands the engine: `functools.partial(nmt_loss, padded=True)`.

Usage:
    model = AttentionNMT(nmt_preset("small", src_words=len(src_vocab), tgt_words=len(tgt_vocab)))
    loss, n_tokens = nmt_loss(model, batch)   # batch: the NMT dict of data/batching.py
    loss, n_tokens = nmt_loss(model, batch, padded=True)   # the graph-capturable path; needs batch["tokens"]
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .attention import AdditiveAttention
from .host_fields import host_tokens
from .padded_rnn import full_precision, padded_bidirectional
from .special_ids import PAD


@dataclass
class NMTConfig:
    """Sizes of the attention NMT model. Vocabulary sizes include the specials (pad 0, unk 1, bos 2, eos 3)."""

    src_words: int  # source vocabulary size
    tgt_words: int  # target vocabulary size
    embedding: int = 100  # word embedding size, both sides
    hidden: int = 1000  # encoder GRU units per direction and decoder GRU units
    attention: int = 2000  # attention layer size (dl4mt: the annotation size 2 * hidden)
    readout: int = 100  # deep output layer size (dl4mt: the embedding size)
    dropout: float = 0.0  # dropout on embeddings and on the readout layer
    sparse_embeddings: bool = False  # sparse gradients for both embedding tables

    def __post_init__(self) -> None:
        for name in ("src_words", "tgt_words"):
            if getattr(self, name) < 5:
                raise ValueError(f"NMTConfig.{name} must be >= 5 (4 specials + 1 word), got {getattr(self, name)}")
        for name in ("embedding", "hidden", "attention", "readout"):
            if getattr(self, name) < 1:
                raise ValueError(f"NMTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"NMTConfig.dropout must be in [0, 1), got {self.dropout}")


def nmt_preset(name: str, *, src_words: int = 15_000, tgt_words: int = 15_000, **overrides) -> NMTConfig:
    """`paper`: dl4mt sizes of the Hogwild paper (embeddings 100, 1,000 GRU units, 15,000 words per side).
    `small`: a CPU-sized model (embeddings 128, 256 units, attention 256, readout 128).
    `overrides` replace single fields, e.g. dropout=0.1."""
    presets = {
        "paper": dict(embedding=100, hidden=1000, attention=2000, readout=100),
        "small": dict(embedding=128, hidden=256, attention=256, readout=128),
    }
    if name not in presets:
        raise ValueError(f"unknown NMT preset {name!r}; choose one of {sorted(presets)}")
    return NMTConfig(src_words=src_words, tgt_words=tgt_words, **{**presets[name], **overrides})


@dataclass
class EncoderOutput:
    """What the decoder attends to; all rows belong to one sentence each (beam search repeats rows)."""

    annotations: Tensor  # (B, S, 2H) bidirectional encoder states, zero on padding
    keys: Tensor  # (B, S, A) attention keys U h_j
    mask: Tensor  # (B, S) True on real source tokens
    initial_state: Tensor  # (B, H) s_0

    def select(self, rows: Tensor) -> "EncoderOutput":
        """Rows `rows` (R,) of every field, e.g. each sentence repeated beam-size times."""
        return EncoderOutput(self.annotations[rows], self.keys[rows], self.mask[rows], self.initial_state[rows])


class AttentionNMT(nn.Module):
    def __init__(self, config: NMTConfig):
        super().__init__()
        self.config = c = config
        self.src_embedding = nn.Embedding(c.src_words, c.embedding, padding_idx=PAD, sparse=c.sparse_embeddings)
        self.tgt_embedding = nn.Embedding(c.tgt_words, c.embedding, padding_idx=PAD, sparse=c.sparse_embeddings)
        self.encoder = nn.GRU(c.embedding, c.hidden, batch_first=True, bidirectional=True)
        self.init_state = nn.Linear(2 * c.hidden, c.hidden)
        self.attention = AdditiveAttention(c.hidden, 2 * c.hidden, c.attention)
        self.decoder_cell = nn.GRUCell(c.embedding + 2 * c.hidden, c.hidden)
        self.readout = nn.Linear(c.hidden + c.embedding + 2 * c.hidden, c.readout)  # [s_i ; E y_{i-1} ; c_i]
        self.output = nn.Linear(c.readout, c.tgt_words)
        self.dropout = nn.Dropout(c.dropout)

    def encode(self, src: Tensor, src_mask: Tensor, host_lengths: Tensor | None = None) -> EncoderOutput:
        """src (B, S), src_mask (B, S) -> encoder output; padding never enters the GRU (packed sequences).
        host_lengths (B,): src_mask.sum(1) on the CPU if the caller has it (nmt_loss); else read here, before any
        compute is queued, so a GPU never waits on it mid-forward."""
        lengths = src_mask.sum(1)  # (B,) on src's device
        host_lengths = lengths.cpu() if host_lengths is None else host_lengths
        if bool((host_lengths == 0).any()):
            raise ValueError("NMT batch has an empty source sentence (src_mask all False in a row)")
        embedded = self.dropout(self.src_embedding(src))  # (B, S, E)
        packed = pack_padded_sequence(embedded, host_lengths, batch_first=True, enforce_sorted=False)
        annotations, _ = full_precision(self.encoder, packed)  # fp32 under autocast too (padded_rnn.py)
        annotations, _ = pad_packed_sequence(annotations, batch_first=True, total_length=src.shape[1])  # (B, S, 2H)
        mean = annotations.sum(1) / lengths[:, None].to(annotations.dtype)  # padding rows are zero
        return EncoderOutput(annotations, self.attention.project_keys(annotations), src_mask,
                             torch.tanh(self.init_state(mean)))

    def encode_padded(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:
        """encode's result with no host read and launch shapes fixed by (B, S): the GRU runs over the padding
        (models/padded_rnn.py) and the lengths stay on src's device. Trusts every row to have a real token (the
        batchers end each source with eos); an empty row would give a NaN mean instead of encode's error."""
        lengths = src_mask.sum(1)  # (B,) on src's device
        embedded = self.dropout(self.src_embedding(src))  # (B, S, E)
        annotations = padded_bidirectional(self.encoder, embedded, lengths)  # (B, S, 2H), zero on padding
        mean = annotations.sum(1) / lengths[:, None].to(annotations.dtype)
        return EncoderOutput(annotations, self.attention.project_keys(annotations), src_mask,
                             torch.tanh(self.init_state(mean)))

    def step(self, embedded: Tensor, state: Tensor, encoded: EncoderOutput) -> tuple[Tensor, Tensor]:
        """One decoder step: embedded previous word (B, E), state s_{i-1} (B, H) -> (s_i (B, H), c_i (B, 2H))."""
        context, _ = self.attention(state, encoded.keys, encoded.annotations, encoded.mask)  # (B, 2H)
        return self.decoder_cell(torch.cat([embedded, context], dim=-1), state), context

    def logits(self, states: Tensor, embedded: Tensor, contexts: Tensor) -> Tensor:
        """Deep output: states (..., H), embedded previous words (..., E), contexts (..., 2H) -> (..., V)."""
        readout = torch.tanh(self.readout(torch.cat([states, embedded, contexts], dim=-1)))
        return self.output(self.dropout(readout))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, host_lengths: Tensor | None = None,
                padded: bool = False) -> Tensor:
        """Teacher forcing: src (B, S), src_mask (B, S), tgt_in (B, T) starting with bos -> logits (B, T, V).
        host_lengths: optional source lengths (B,) on the CPU (see encode); padded: encode_padded instead of encode
        (host_lengths unused)."""
        encoded = self.encode_padded(src, src_mask) if padded else self.encode(src, src_mask, host_lengths)
        embedded = self.dropout(self.tgt_embedding(tgt_in))  # (B, T, E)
        state = encoded.initial_state
        states, contexts = [], []
        for previous in embedded.unbind(1):  # unbind, not embedded[:, i]: one backward op instead of T slices
            state, context = self.step(previous, state, encoded)
            states.append(state)
            contexts.append(context)
        return self.logits(torch.stack(states, 1), embedded, torch.stack(contexts, 1))  # (B, T, V)

    def decode_step(self, previous: Tensor, state: Tensor, encoded: EncoderOutput) -> tuple[Tensor, Tensor]:
        """Search step: previous words (B,), state (B, H) -> log-probabilities (B, V), new state (B, H)."""
        embedded = self.tgt_embedding(previous)  # (B, E)
        new_state, context = self.step(embedded, state, encoded)
        return torch.log_softmax(self.logits(new_state, embedded, context), dim=-1), new_state


def nmt_loss(model: AttentionNMT, batch: dict, padded: bool = False) -> tuple[Tensor, int]:
    """Mean negative log-likelihood per target token (eos included, bos and padding excluded), and the token count.
    padded: the graph-capturable path (module docstring): no host read; the count returned is batch["tokens"]."""
    tgt, tgt_mask, src_mask = batch["tgt"], batch["tgt_mask"], batch["src_mask"]
    if padded:
        n_tokens = host_tokens(batch, "NMT")
        logits = model(batch["src"], src_mask, tgt[:, :-1], padded=True)  # (B, T-1, V)
        gold = tgt[:, 1:].masked_fill(~tgt_mask[:, 1:], -100)  # (B, T-1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), gold.reshape(-1), ignore_index=-100,
                               reduction="sum")
        # The divisor is counted on the device: a host int would be frozen into a captured graph.
        return loss / tgt_mask[:, 1:].sum(), n_tokens
    # The source lengths and the token count in one read of the device, before any compute is queued: a read
    # after the forward would stall a GPU's launch queue between forward and backward.
    counts = torch.cat([src_mask.sum(1), tgt_mask[:, 1:].sum().view(1)]).cpu()  # (B + 1,)
    n_tokens = int(counts[-1])
    if n_tokens == 0:
        raise ValueError("NMT batch has no target token after bos (tgt_mask[:, 1:] all False)")
    logits = model(batch["src"], src_mask, tgt[:, :-1], counts[:-1])  # (B, T-1, V)
    gold = tgt[:, 1:].masked_fill(~tgt_mask[:, 1:], -100)  # (B, T-1)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), gold.reshape(-1), ignore_index=-100,
                           reduction="sum")
    return loss / n_tokens, n_tokens
