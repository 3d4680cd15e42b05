"""Bidirectional nn.GRU / nn.LSTM over right-padded sequences with the lengths on the device: the packed path's
results at every real position, with no host read and one launch shape per padded (B, T).

pack_padded_sequence needs the lengths on the CPU and its launch shapes follow them, so a step built on it reads
the device (a GPU sync) and cannot be captured as a CUDA graph. Here each layer and direction of the module runs as
its own one-direction RNN (torch._VF.gru/lstm, what nn.GRU/nn.LSTM call, given that direction's weights) over the
whole padded (B, T):
  - forward: the real tokens come first in each row, so padding after them cannot reach their states;
  - backward: each row is first reversed by its own length (a gather with indices built from the lengths on the
    device: position t < L reads L-1-t, padding stays in place), run forward, and reversed back by the same gather.
Outputs at padded positions are zeroed, as pad_packed_sequence leaves them; between stacked layers dropout follows
nn.LSTM's rule (training only, not after the last layer). Parameters stay the module's own: the padded and the
packed path train the same weights, so a run picks either per step.

Weights: cuDNN runs an RNN on its weights in place only when they lie back to back, in its order, from the start of
one storage (else it copies them into a new flat buffer at every call, with a warning). nn.GRU/nn.LSTM keep all
layers and directions in one such buffer on a GPU, so a one-direction call finds only the first direction's weights
there. `flatten_per_direction` lays each layer and direction out in a storage of its own, once (the first padded call
on a GPU does it; the Parameters stay the same objects, with the same values): then no direction is copied. The
module's own bidirectional call (the packed path) would copy instead; the models use one path per module on a GPU.

Precision: every multi-step nn.GRU / nn.LSTM of the models runs in its parameters' dtype (fp32) even under
torch.autocast(bfloat16), by design: torch's autocast kernel for cuDNN's RNN (`_cudnn_rnn`, ATen's
cudnn/AutocastRNN.cpp) casts its input, state and weights to fp16 whatever the autocast dtype (and copies the weights
into a new fp16 buffer at every call), and fp16 without a gradient scaler can underflow the gradients. So the models
call these layers through `full_precision` (autocast off) and the padded path runs with autocast off; the decoder's
nn.GRUCell and the matrix products keep autocast's dtype (bf16).

Usage:
    states = padded_bidirectional(self.encoder, embedded, lengths)   # (B, T, 2H), zero at t >= lengths[b]
    output, state = full_precision(self.encoder, packed)             # the module's call, never cast to fp16
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence


def autocast_off(device: torch.device) -> contextlib.AbstractContextManager:
    """torch.autocast(enabled=False) on `device`'s type (nothing for a device without autocast, e.g. 'meta')."""
    available = torch.amp.is_autocast_available(device.type)
    return torch.autocast(device.type, enabled=False) if available else contextlib.nullcontext()


def full_precision(rnn: nn.GRU | nn.LSTM, x: Tensor | PackedSequence) -> tuple:
    """rnn(x) with autocast off, x in the parameters' dtype (module docstring: why)."""
    with autocast_off((x.data if isinstance(x, PackedSequence) else x).device):
        return rnn(x.to(rnn.weight_ih_l0.dtype))


def real_positions(lengths: Tensor, steps: int) -> Tensor:
    """lengths (B,) on any device -> (B, steps) bool, True at t < lengths[b]; no host read."""
    return torch.arange(steps, device=lengths.device)[None, :] < lengths[:, None]


def reverse_index(lengths: Tensor, steps: int) -> Tensor:
    """(B, steps) int64: L-1-t at the real positions t < L = lengths[b], t itself at padding. Gathering with it
    reverses each row's real tokens and keeps the padding behind them; it is its own inverse."""
    positions = torch.arange(steps, device=lengths.device)[None, :]  # (1, T)
    lengths = lengths.to(torch.int64)[:, None]  # (B, 1)
    return torch.where(positions < lengths, lengths - 1 - positions, positions)


def reverse_rows(x: Tensor, index: Tensor) -> Tensor:
    """x (B, T, D) gathered along T with index (B, T) from reverse_index."""
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))


def _direction_weights(rnn: nn.RNNBase, layer: int, reverse: bool) -> list[Tensor]:
    suffix = "_reverse" if reverse else ""
    names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
    if rnn.bias:
        names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
    return [getattr(rnn, name) for name in names]


def _flat(weights: list[Tensor]) -> bool:
    """Whether `weights` lie back to back, in order, from the start of one storage (what cuDNN takes in place)."""
    start = weights[0].untyped_storage().data_ptr()
    if weights[0].storage_offset() != 0:
        return False
    offset = 0
    for weight in weights:
        if (not weight.is_contiguous() or weight.untyped_storage().data_ptr() != start
                or weight.storage_offset() != offset):
            return False
        offset += weight.numel()
    return True


@torch.no_grad()
def flatten_per_direction(rnn: nn.GRU | nn.LSTM) -> int:
    """Give each layer and direction of `rnn` a flat storage of its own (module docstring: Weights), where it has not
    one yet; returns how many were laid out anew (0 once done). The Parameters keep their identity and values."""
    moved = 0
    for layer in range(rnn.num_layers):
        for reverse in (False, True) if rnn.bidirectional else (False,):
            weights = _direction_weights(rnn, layer, reverse)
            if _flat(weights):
                continue
            flat = torch.empty(sum(w.numel() for w in weights), dtype=weights[0].dtype, device=weights[0].device)
            offset = 0
            for weight in weights:
                view = flat[offset:offset + weight.numel()].view_as(weight)
                view.copy_(weight)
                weight.data = view  # the same Parameter, now a view of this direction's storage
                offset += weight.numel()
            moved += 1
    return moved


def one_direction(rnn: nn.GRU | nn.LSTM, x: Tensor, layer: int, reverse: bool) -> Tensor:
    """x (B, T, In) -> (B, T, H): layer `layer`'s forward (or, with `reverse`, backward-direction) weights run left
    to right over x from a zero state, as a one-layer, one-direction RNN (batch_first)."""
    weights = _direction_weights(rnn, layer, reverse)
    h0 = x.new_zeros(1, x.shape[0], rnn.hidden_size)
    if isinstance(rnn, nn.LSTM):
        out, _, _ = torch._VF.lstm(x, (h0, h0), weights, rnn.bias, 1, 0.0, rnn.training, False, True)
    else:
        out, _ = torch._VF.gru(x, h0, weights, rnn.bias, 1, 0.0, rnn.training, False, True)
    return out


def padded_bidirectional(rnn: nn.GRU | nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """rnn: a bidirectional, batch_first nn.GRU or nn.LSTM (any number of layers, no projection); x (B, T, In)
    right-padded, lengths (B,) on x's device -> (B, T, 2H): the packed module's output, zero at t >= lengths[b]."""
    if not (isinstance(rnn, (nn.GRU, nn.LSTM)) and rnn.bidirectional and rnn.batch_first):
        raise ValueError(f"padded_bidirectional needs a bidirectional batch_first nn.GRU or nn.LSTM, got {rnn}")
    if getattr(rnn, "proj_size", 0):
        raise ValueError("padded_bidirectional does not handle nn.LSTM(proj_size > 0)")
    if x.is_cuda:
        flatten_per_direction(rnn)  # once; cuDNN then copies no direction's weights (module docstring)
    steps = x.shape[1]
    x = x.to(rnn.weight_ih_l0.dtype)
    keep = real_positions(lengths, steps)[..., None].to(x.dtype)  # (B, T, 1)
    index = reverse_index(lengths, steps)  # (B, T)
    with autocast_off(x.device):  # the module's dtype, never fp16 (module docstring)
        for layer in range(rnn.num_layers):
            if layer:
                x = F.dropout(x, rnn.dropout, rnn.training)  # nn.LSTM/GRU: between layers only
            forward = one_direction(rnn, x, layer, reverse=False)  # (B, T, H)
            backward = reverse_rows(one_direction(rnn, reverse_rows(x, index), layer, reverse=True), index)
            x = torch.cat([forward, backward], dim=-1) * keep  # (B, T, 2H)
    return x
