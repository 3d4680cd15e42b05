"""Trains with one slow worker and an evaluation of the starting parameters that computes in torch for a minute; the
evaluation tests kill the worker with SIGKILL while it runs. Prints the failure's first line and exits 1, as run.py
does.

Usage: python tests/hogwild/engine_scripts/evaluate_while_a_worker_dies.py RUN_DIR
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

import torch  # noqa: E402

import hogwild  # noqa: E402
from tests.hogwild import engine_helpers as H  # noqa: E402


def evaluate(model):
    """A minute of matrix products: inside torch's kernels most of the time, as a beam search's is."""
    open(os.path.join(sys.argv[1], "evaluating"), "w").close()
    x, deadline = torch.randn(300, 300), time.monotonic() + 60
    while time.monotonic() < deadline:
        x = torch.tanh(x @ x)
    return {"score": 1.0}


if __name__ == "__main__":
    try:
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
            workers=1, epochs=10_000, lr=0.01, progress=False, tensorboard=False, checkpoint_dir=sys.argv[1],
            eval_at_start=True), evaluate)
    except hogwild.WorkerFailed as error:
        print(str(error).splitlines()[0], flush=True)
        sys.exit(1)
