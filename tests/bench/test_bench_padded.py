"""bench/bench_padded.py: the --quick run times packed, padded and bucket-padded steps of both models and prints
each one's ratio to its packed step, and its command."""
import re

import pytest
import torch

from bench import bench_padded


def test_quick_run_prints_three_ways_per_batch_with_the_ratio_to_packed(run_bench):
    done = run_bench("bench_padded", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^(\S+ B=\d+ (?:packed|padded(?: to \S+)?)) +\d+\.\d +(\d+\.\d\d) +1$", done.stdout, re.M)
    names = [name.rsplit(" to ", 1)[0] for name, _ in rows]
    assert names == [f"{model} {way}" for model in ("pos/small B=1", "pos/small B=16", "nmt/small B=16")
                     for way in ("packed", "padded", "padded")]
    assert [ratio for _, ratio in rows[::3]] == ["1.00"] * 3  # each packed step is the unit of its ratios
    edge = "(8|16|24|32|48|64)"
    assert re.search(rf"^pos/small B=16 padded to T={edge} ", done.stdout, re.M)  # bucket edges
    assert re.search(rf"^nmt/small B=16 padded to S={edge},T={edge} ", done.stdout, re.M)
    assert "# command: python -m bench.bench_padded --quick" in done.stdout


def test_cuda_without_a_gpu_is_refused_naming_the_benchmark():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit, match=r"^bench_padded: --device cuda asked for, but torch sees no GPU$"):
        bench_padded.main(["--quick", "--device", "cuda"])
