"""Tiny models, batches and loss functions for the engine tests (module-level: picklable into spawned workers)."""
from __future__ import annotations

import multiprocessing
import os
import time

import torch
from torch import nn

from hogwild.feed.tickets import epoch_order
from hogwild.worker.gradients import batch_seed


def regression_batches(n: int = 24, size: int = 8, features: int = 4, seed: int = 0) -> list[tuple]:
    """(x (size, features), y (size, 1)) with y = x @ w + 0.5 and a little noise."""
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=generator)
    batches = []
    for _ in range(n):
        x = torch.randn(size, features, generator=generator)
        batches.append((x, x @ w + 0.5 + 0.01 * torch.randn(size, 1, generator=generator)))
    return batches


def regression_model(seed: int = 0, features: int = 4, dropout: float = 0.1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 1))


def mse_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def dataset_loss(model: nn.Module, batches: list) -> float:
    model.eval()
    with torch.no_grad():
        value = sum(mse_loss(model, b).item() for b in batches) / len(batches)
    model.train()
    return value


class Tagger(nn.Module):
    """Sparse embedding + linear tagger: words (B, T) -> tag logits (B, T, tags)."""

    def __init__(self, vocab: int = 50, dim: int = 6, tags: int = 3, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, dim, sparse=True)
        self.out = nn.Linear(dim, tags)

    def forward(self, words: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(words))  # (B, T, tags)


def tagger_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, int]:
    logits = model(batch["words"])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["tags"].reshape(-1))
    return loss, int(batch["words"].numel())


def tagger_batches(n: int = 12, words_used: int = 20, seed: int = 0) -> list[dict]:
    """Batches that only ever use word ids < words_used."""
    generator = torch.Generator().manual_seed(seed)
    return [{"words": torch.randint(0, words_used, (2, 5), generator=generator),
             "tags": torch.randint(0, 3, (2, 5), generator=generator)} for _ in range(n)]


class Counter(nn.Module):
    """A model whose shared buffer counts how often each batch id was trained on."""

    def __init__(self, n_batches: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.register_buffer("seen", torch.zeros(n_batches, dtype=torch.int64))


def counting_loss(model: Counter, batch: torch.Tensor) -> torch.Tensor:
    model.seen[int(batch[0])] += 1  # the buffer is in shared memory: the parent sees every worker's counts
    time.sleep(0.01)  # long enough that both workers get batches
    return (model.weight * 0.0).sum()


def id_batches(n: int) -> list[torch.Tensor]:
    return [torch.tensor([i]) for i in range(n)]


def poisoned_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """mse_loss, times NaN when the batch's third element says so (a non-finite gradient)."""
    x, y, poison = batch
    loss = mse_loss(model, (x, y))
    return loss * torch.nan if bool(poison) else loss


def failing_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """Raises on the batch marked -1 (a worker failure with a traceback)."""
    if int(batch[2]) == -1:
        raise ValueError("deliberate failure on the marked batch")
    time.sleep(0.01)
    return mse_loss(model, batch[:2])


def slow_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    time.sleep(float(os.environ.get("HOGWILD_TEST_STEP_SLEEP", "0.02")))
    return mse_loss(model, batch)


def uneven_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """Worker 1 steps 30 times slower than worker 0 (a slow device beside a fast one)."""
    time.sleep(0.03 if multiprocessing.current_process().name.endswith("-1") else 0.001)
    return mse_loss(model, batch)


def dies_after_a_restart_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """slow_loss, except in a process spawned after HOGWILD_TEST_DIE_AT_START was set: it raises at its first step."""
    if os.environ.get("HOGWILD_TEST_DIE_AT_START"):
        raise RuntimeError("deliberate failure: this worker dies at once")
    return slow_loss(model, batch)


def serial_reference(model: nn.Module, loss_fn, batches: list, optimizer: torch.optim.Optimizer, epochs: int,
                     seed: int, clip_norm: float | None = None, shuffle: bool = True) -> list[float]:
    """The plain torch loop the engine must reproduce with one worker: same order, same per-batch RNG."""
    losses = []
    for epoch in range(epochs):
        for index in epoch_order(len(batches), seed, epoch, shuffle):
            torch.manual_seed(batch_seed(seed, epoch, int(index)))
            optimizer.zero_grad()
            out = loss_fn(model, batches[int(index)])
            loss = out[0] if isinstance(out, tuple) else out
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            losses.append(loss.item())
    return losses


def flagged_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """mse_loss that raises once the file named by $HOGWILD_TEST_FAIL_FLAG exists (a worker failure at a moment the
    test chooses)."""
    if os.path.exists(os.environ["HOGWILD_TEST_FAIL_FLAG"]):
        raise RuntimeError("deliberate failure: the flag file exists")
    time.sleep(0.01)
    return mse_loss(model, batch)


def delayed_reference(model: nn.Module, loss_fn, batches: list, optimizer: torch.optim.Optimizer, epochs: int,
                      seed: int, shuffle: bool = True) -> list[float]:
    """The torch loop a worker with overlapped updates must reproduce: each step computes on a copy of the
    parameters pulled before the previous step's update lands (one step of delay), and the last update lands
    at the end."""
    import copy
    losses, pending, net = [], None, copy.deepcopy(model)
    for epoch in range(epochs):
        for index in epoch_order(len(batches), seed, epoch, shuffle):
            with torch.no_grad():
                for replica, param in zip(net.parameters(), model.parameters()):
                    replica.copy_(param)  # the pull
            if pending is not None:  # the previous update lands after the pull
                for param, grad in zip(model.parameters(), pending):
                    param.grad = grad
                optimizer.step()
            torch.manual_seed(batch_seed(seed, epoch, int(index)))
            net.zero_grad(set_to_none=True)
            out = loss_fn(net, batches[int(index)])
            loss = out[0] if isinstance(out, tuple) else out
            loss.backward()
            pending = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
            losses.append(loss.item())
    if pending is not None:
        for param, grad in zip(model.parameters(), pending):
            param.grad = grad
        optimizer.step()
    return losses


def bf16_mse_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """mse_loss with its forward under CPU bf16 autocast (the serial reference of Config.amp='bf16')."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return mse_loss(model, batch)


def fails_late_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """Raises after 2 s in its first step: a worker that fails while the run is already stopping."""
    time.sleep(2.0)
    raise ValueError("deliberate failure in the last step")


def many_tensors_model(layers: int = 40) -> nn.Module:
    """A regression model of many tiny tensors (4x4 weights, 4 biases): in /dev/shm each takes a whole page."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)], nn.Linear(4, 1))


class CudaContextProbe:
    """mse_loss that also records, in flags[0] (a shared tensor), whether its process holds a CUDA context on
    cuda:0 (checked at every step: after the first one, the update thread has run too)."""

    def __init__(self, flags: torch.Tensor):
        self.flags = flags

    def __call__(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        self.flags[0] = max(float(self.flags[0]), float(torch._C._cuda_hasPrimaryContext(0)))
        return mse_loss(model, batch)


def wait_for(condition, timeout: float = 60.0) -> bool:
    """Poll condition() every 50 ms until it holds (True) or timeout seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
