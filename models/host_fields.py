"""The host-side fields of a batch dict: plain Python values that stay on the host when the batch's tensors move to
a device, so that a step reads them without waiting for the device.

data/batching.py documents the contract; today one such field, `tokens` (int): the number of positions the loss
counts (POS: tags != -100; NMT: target tokens after bos, eos included). The padded losses return it as their count,
where the packed losses read the count back from the device.

Usage:
    n_tokens = host_tokens(batch, "NMT")        # in a loss, before any compute
    on_gpu = to_device(batch, torch.device("cuda"))   # tensors moved, host fields kept
"""
from __future__ import annotations

from typing import Any

import torch


def host_tokens(batch: dict[str, Any], task: str) -> int:
    """batch["tokens"], checked: a clear error when the batch lacks it (built by hand or by an older batcher) or
    has no token to predict."""
    tokens = batch.get("tokens")
    if not isinstance(tokens, int):
        raise ValueError(f"{task} padded loss: the batch has no host-side 'tokens' int (got {type(tokens).__name__});"
                         f" build it with data/batching.py's batchers or add the count of predicted tokens")
    if tokens < 1:
        raise ValueError(f"{task} batch has no token to predict (batch['tokens'] == {tokens})")
    return tokens


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch with every tensor on `device` and every host-side field as it is."""
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}
