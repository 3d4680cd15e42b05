"""A tiny next-word model holding what research models hold - a tied input/output embedding, frozen parameters
(a frozen layer and a position table with requires_grad=False), dropout, an int64 counter and a bool mask - with its
batches, loss and serial reference (module-level: picklable into spawned workers)."""
from __future__ import annotations

import torch
from torch import nn

from hogwild.feed.tickets import epoch_order
from hogwild.worker.gradients import batch_seed

VOCAB, DIM, LENGTH = 12, 8, 6
TRAINABLE = ("embed.weight", "hidden.weight", "hidden.bias")  # model.parameters() order; out.weight is embed.weight
FROZEN = ("positions", "frozen.weight", "frozen.bias")


class FrozenTiedLM(nn.Module):
    """words (B, T) -> next-word logits (B, T, VOCAB)."""

    def __init__(self, dropout: float = 0.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, DIM)
        self.positions = nn.Parameter(torch.randn(LENGTH, DIM), requires_grad=False)  # like Marian's sinusoids
        self.frozen = nn.Linear(DIM, DIM).requires_grad_(False)
        self.hidden = nn.Linear(DIM, DIM)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(DIM, VOCAB, bias=False)
        self.out.weight = self.embed.weight  # tied: one Parameter in two modules
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64))  # training forwards seen
        allowed = torch.ones(VOCAB, dtype=torch.bool)
        allowed[-1] = False  # the last word is never predicted
        self.register_buffer("allowed", allowed)

    def forward(self, words: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.forwards += 1
        h = self.embed(words) + self.positions[:words.shape[1]]  # (B, T, DIM)
        h = torch.tanh(self.hidden(self.dropout(torch.tanh(self.frozen(h)))))
        return self.out(h).masked_fill(~self.allowed, -1e4)  # (B, T, VOCAB)


def next_word_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))


def seq2seq_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """A Hugging Face seq2seq model's loss (tests/hogwild/test_hf_model.py; here to be picklable by name)."""
    return model(input_ids=batch["source"], attention_mask=batch["mask"], labels=batch["target"]).loss


def word_batches(n: int = 10, size: int = 4, seed: int = 0) -> list[torch.Tensor]:
    """(size, LENGTH) word ids in 0..VOCAB-2 following a learnable pattern: each word is the previous one + 1 or + 2."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        start = torch.randint(0, VOCAB - 1, (size, 1), generator=generator)
        steps = torch.randint(1, 3, (size, LENGTH - 1), generator=generator)
        batches.append(torch.cat([start, start + steps.cumsum(1)], 1) % (VOCAB - 1))
    return batches


def dataset_loss(model: nn.Module, batches: list) -> float:
    model.eval()
    with torch.no_grad():
        value = sum(next_word_loss(model, b).item() for b in batches) / len(batches)
    model.train()
    return value


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """What a user hands torch.optim: the parameters that require grad."""
    return [p for p in model.parameters() if p.requires_grad]


def serial_sync_reference(model: nn.Module, loss_fn, batches: list, optimizer: torch.optim.Optimizer, epochs: int,
                          seed: int, workers: int) -> None:
    """mode='sync' serially: each group of `workers` batches of the epoch's order averaged into one step."""
    for epoch in range(epochs):
        order = [int(i) for i in epoch_order(len(batches), seed, epoch, True)]
        for first in range(0, len(order), workers):
            group = order[first:first + workers]
            optimizer.zero_grad()
            for index in group:
                torch.manual_seed(batch_seed(seed, epoch, index))
                (loss_fn(model, batches[index]) / len(group)).backward()
            optimizer.step()
