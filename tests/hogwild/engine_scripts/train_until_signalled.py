"""Trains with 2 slow workers (or WORKERS) for a long time; the supervisor tests signal it. Prints the result as JSON.
With HOLD_WORKER_START=S each worker waits S seconds while loading this script as its main module (after `import
hogwild`, before its prelude), as a worker importing torch on a busy machine does for seconds.

Usage: python tests/hogwild/engine_scripts/train_until_signalled.py RUN_DIR [WORKERS]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

import hogwild  # noqa: E402
from tests.hogwild import engine_helpers as H  # noqa: E402

if __name__ == "__mp_main__" and os.environ.get("HOLD_WORKER_START"):  # a spawned worker, still starting
    time.sleep(float(os.environ["HOLD_WORKER_START"]))

if __name__ == "__main__":
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=int(sys.argv[2]) if len(sys.argv) > 2 else 2, epochs=10_000, lr=0.01, log_every=1, progress=False,
        tensorboard=False, checkpoint_dir=sys.argv[1]))
    print(json.dumps({"stop_reason": result.stop_reason, "updates": result.updates}), flush=True)
