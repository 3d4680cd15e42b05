"""Trains with 2 slow workers for a long time; the supervisor tests signal it. Prints the result as JSON.

Usage: python tests/hogwild/engine_scripts/train_until_signalled.py RUN_DIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

import hogwild  # noqa: E402
from tests.hogwild import engine_helpers as H  # noqa: E402

if __name__ == "__main__":
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=2, epochs=10_000, lr=0.01, log_every=1, progress=False, tensorboard=False,
        checkpoint_dir=sys.argv[1]))
    print(json.dumps({"stop_reason": result.stop_reason, "updates": result.updates}), flush=True)
