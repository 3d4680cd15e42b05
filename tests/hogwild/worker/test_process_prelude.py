"""hogwild/worker/process_prelude.py in real processes: a worker leaves nothing for the resource tracker to clean
up, also when torch's compiler draws a (disabled) tqdm bar inside it, which took a multiprocessing lock."""
import os
import subprocess
import sys
import textwrap

import pytest

from tests.tasks.helpers import REPO

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import hogwild
    from tests.hogwild import engine_helpers as H

    if __name__ == "__main__":
        result = hogwild.train(H.regression_model(dropout=0.0), H.mse_loss, H.regression_batches(),
                               hogwild.Config(workers=1, max_steps=3, compile="aot_eager", progress=False,
                                              tensorboard=False))
        print("updates", result.updates)
""")


def test_a_compiled_worker_leaves_no_semaphore_to_the_resource_tracker(tmp_path):
    """--compile printed 'resource_tracker: There appear to be 1 leaked semaphore objects' at the end of every run."""
    script = tmp_path / "compiled.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["updates 3"]
    assert "leaked" not in done.stderr, done.stderr
