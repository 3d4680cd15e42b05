"""Trains H.many_tensors_model with Adam for 4 updates (2 workers); run under a small /dev/shm by
tests/hogwild/share/test_resources.py. Prints the result as JSON, or the error on stderr with exit status 1; then lists
the torch_* files left in /dev/shm.

Usage: python tests/hogwild/engine_scripts/train_in_small_shm.py RUN_DIR CHECK_SHM(1|0)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

import hogwild  # noqa: E402
from tests.hogwild import engine_helpers as H  # noqa: E402

if __name__ == "__main__":
    status = 0
    try:
        result = hogwild.train(H.many_tensors_model(), H.mse_loss, H.regression_batches(n=8), hogwild.Config(
            workers=2, max_steps=4, optimizer="adam", lr=0.01, progress=False, tensorboard=False,
            checkpoint_dir=sys.argv[1], check_shm=sys.argv[2] == "1"))
        print(json.dumps({"updates": result.updates}), flush=True)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        status = 1
    print(json.dumps({"left": sorted(name for name in os.listdir("/dev/shm") if name.startswith("torch_"))}))
    sys.exit(status)
