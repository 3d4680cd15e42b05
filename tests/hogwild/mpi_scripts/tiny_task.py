"""A tiny seeded regression task shared by the MPI test scripts and bench/bench_distributed.py.

Usage: `model, batches = make_task(seed=0); loss_fn(model, batches[0]); full_loss(model, batches)`
"""
import torch
from torch import nn


def make_task(seed: int = 0, n_batches: int = 64, batch_size: int = 8, features: int = 16, hidden: int = 32):
    """A 2-layer MLP and batches (x (B, F), y (B, 1)) from a fixed random teacher: the loss can approach 0."""
    generator = torch.Generator().manual_seed(1234)  # the data never depends on `seed`
    teacher = torch.randn(features, 1, generator=generator) / features ** 0.5
    x = torch.randn(n_batches * batch_size, features, generator=generator)
    y = torch.tanh(x @ teacher * 2.0)
    batches = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    return model, batches


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch  # (B, F), (B, 1)
    return nn.functional.mse_loss(model(x), y)


def full_loss(model: nn.Module, batches) -> float:
    """Mean squared error over all batches (the evaluation metric)."""
    with torch.no_grad():
        return float(sum(loss_fn(model, b) for b in batches) / len(batches))
