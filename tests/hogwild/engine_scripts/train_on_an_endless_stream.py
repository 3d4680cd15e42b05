"""Trains 2 workers on an endless generator of 0.5 MiB batches for 1,500 steps (750 MiB streamed) and prints the
result and the parent's peak resident memory as JSON; the streaming test runs it under a cap on its address space.
Read whole (as hogwild.train once did with any iterable), the generator never ends: it fills the cap and fails.

Usage: python tests/hogwild/engine_scripts/train_on_an_endless_stream.py RUN_DIR
"""
import json
import os
import resource
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hogwild  # noqa: E402

FEATURES = 1024


def endless():
    """(x (128, 1024), y (128, 1)) with y = x @ w, forever: 0.5 MiB a batch."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(FEATURES, 1, generator=generator) / FEATURES ** 0.5
    while True:
        x = torch.randn(128, FEATURES, generator=generator)
        yield x, x @ w


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


if __name__ == "__main__":
    torch.manual_seed(0)
    result = hogwild.train(nn.Linear(FEATURES, 1), loss_fn, endless(), hogwild.Config(
        workers=2, max_steps=1500, lr=0.1, progress=False, tensorboard=False, checkpoint_dir=sys.argv[1]))
    print(json.dumps({"stop_reason": result.stop_reason, "updates": result.updates, "loss": result.final_loss,
                      "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)
