"""Additive (Bahdanau) attention over encoder states, with padding masked out.

score(s, h_j) = v . tanh(W s + U h_j). U h_j does not depend on the decoder step, so it is computed once per sentence
(`keys`) and each step costs one (B, H) x (H, A) product plus the (B, S, A) tanh.

Usage:
    attention = AdditiveAttention(query_size=H, key_size=2 * H, attention_size=A)
    keys = attention.project_keys(annotations)                     # once per batch: (B, S, A)
    context, weights = attention(query, keys, annotations, src_mask)  # each step: (B, 2H), (B, S)
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class AdditiveAttention(nn.Module):
    def __init__(self, query_size: int, key_size: int, attention_size: int):
        super().__init__()
        self.key_projection = nn.Linear(key_size, attention_size, bias=True)
        self.query_projection = nn.Linear(query_size, attention_size, bias=False)
        self.energy = nn.Linear(attention_size, 1, bias=False)

    def project_keys(self, annotations: Tensor) -> Tensor:
        """annotations (B, S, K) -> keys (B, S, A)."""
        return self.key_projection(annotations)

    def forward(self, query: Tensor, keys: Tensor, annotations: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """query (B, Q), keys (B, S, A), annotations (B, S, K), mask (B, S) True on real tokens
        -> context (B, K), weights (B, S) summing to 1 over the real tokens and 0 on padding."""
        energies = self.energy(torch.tanh(keys + self.query_projection(query)[:, None, :])).squeeze(-1)  # (B, S)
        weights = torch.softmax(energies.masked_fill(~mask, float("-inf")), dim=-1)  # (B, S)
        context = torch.bmm(weights[:, None, :], annotations).squeeze(1)  # (B, K)
        return context, weights
