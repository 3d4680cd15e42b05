"""Which of a model's tensors the engine trains, and which it only shares and saves.

Trained: the parameters that require grad, each once. A Parameter tied into two modules (lm_head.weight is
decoder.embed_tokens.weight) is one tensor: one gradient, one optimizer state, one update per step, as
`model.parameters()` lists it once. Shared only: frozen parameters (requires_grad=False: sinusoidal position
tables, frozen embeddings, everything outside a few fine-tuned layers) and buffers of any dtype (running statistics,
int64 counters, bool masks). These live in shared memory, reach every replica and are saved in checkpoints like the
trained ones, but never get a hook, a gradient, optimizer state or an update.

Serves step 2 of `hogwild.train` (share: the optimizer is built over the trained parameters), step 3 (each worker
attaches to them and hooks them) and steps 4-5 (checkpoints keep a tied tensor once).

Usage: `params = trainable_parameters(model)`; `state = private_copy(model.state_dict())`
"""
from __future__ import annotations

from torch import Tensor, nn


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the workers train: requires_grad, each tied Parameter once, in `model.parameters()` order."""
    return [param for param in model.parameters() if param.requires_grad]


def _storage_key(tensor: Tensor) -> tuple:
    """Equal for two views of the same memory with the same layout (the names of one tied weight)."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
            tensor.dtype, tensor.device)


def private_copy(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A detached copy of a state_dict in private memory. Names of one tensor (a tied weight appears under every
    module that holds it) share one copy, so a checkpoint stores it once and loads back tied."""
    copies: dict[tuple, Tensor] = {}
    result = {}
    for name, tensor in state.items():
        key = _storage_key(tensor)
        if key not in copies:
            copies[key] = tensor.detach().clone()
        result[name] = copies[key]
    return result


def unique_nbytes(state: dict[str, Tensor]) -> int:
    """Bytes of a state_dict's tensors, a tied tensor counted once."""
    unique = {_storage_key(tensor): tensor for tensor in state.values()}
    return sum(tensor.numel() * tensor.element_size() for tensor in unique.values())
