"""bench/bench_gpu.py runs end to end on the CPU ('cpu-replica', tiny batches), as the README line shows."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_gpu_smoke_run_on_cpu_replica():
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--device", "cpu-replica", "--preset", "small",
                           "--updates", "10", "--workers", "1", "--optimizers", "sgd", "--nmt-pairs", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for task in ("pos", "nmt"):
        assert f"{task} / sgd: plain " in out and "engine1/plain = " in out
    assert out.count("  1  ") >= 2  # the N=1 phase row of each task
    assert out.count("26.89") == 2 and out.count("6.96") == 2  # the projection beside the paper's Table 1


def test_bench_gpu_refuses_cuda_without_a_gpu_and_bad_flags():
    import torch
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--workers", "0"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "--workers" in done.stderr
    if not torch.cuda.is_available():
        done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--device", "cuda:0"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "torch sees no GPU" in done.stderr
