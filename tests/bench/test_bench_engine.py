"""bench/bench_engine.py: the --quick run trains every variant and prints its command and the target ratios; the
steady-state measures on hand-made stamps; the mnist_hogwild loop is the plain training loop."""
import re

import pytest
import torch

from bench import bench_engine
from bench.bench_engine import Tagger, cpu_ms_per_update, mnist_hogwild_train, steady_rate, synthetic_batches
from tests.bench.usage_errors import assert_refused


@pytest.mark.slow
def test_quick_run_prints_every_variant_the_ratios_and_its_command(run_bench):
    done = run_bench("bench_engine", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "medians over 1 rounds, 40 updates each" in done.stdout
    for variant in ("plain", "engine1", "engine2", "mnist1", "mnist2"):
        assert re.search(rf"^  {variant} +\d+\.\d updates/s", done.stdout, re.M), variant
    for ratio in ("engine2/engine1", "engine1/plain", "engine2/mnist2"):
        assert re.search(rf"^  {ratio} = \d+\.\d{{3}}   target >= ", done.stdout, re.M), ratio
    assert "command: python -m bench.bench_engine --quick" in done.stdout


def test_unknown_variant_and_too_few_updates_are_refused(capsys):
    assert_refused(bench_engine.main, ["--variants", "plain,engine9"], "--variants: unknown ['engine9']", capsys)
    assert_refused(bench_engine.main, ["--updates", "10"], "--updates must be >= 20", capsys)


def test_steady_rate_counts_the_middle_80_percent_and_cpu_time_per_process():
    # 11 updates 0.5 s apart by two processes (pids 7 and 8); process 7's CPU clock runs 2 ms per update, 8's 4 ms
    wall = 1.0 + torch.arange(11, dtype=torch.float64) * 0.5  # never 0: 0 marks a batch never trained
    pid = torch.tensor([7.0, 8.0] * 5 + [7.0], dtype=torch.float64)
    cpu = torch.where(pid == 7, 0.002, 0.004) * torch.arange(11, dtype=torch.float64)
    stamps = torch.stack([wall, cpu, pid], dim=1)  # (11, 3)
    assert steady_rate(stamps) == pytest.approx(2.0)  # updates 1..8: 7 intervals in 3.5 s
    # process 7: stamps 0,2,..,10 -> 0.020 s over 5 updates; process 8: 1,3,..,9 -> 0.032 s over 4
    assert cpu_ms_per_update(stamps) == pytest.approx(1000 * (0.020 + 0.032) / 9)


def test_mnist_hogwild_loop_is_the_plain_sgd_loop():
    batches = synthetic_batches(3, batch_size=2, length=4, n_words=30, n_tags=5, seed=0)
    torch.manual_seed(0)
    model, reference = Tagger(30, 5, 8, 8), Tagger(30, 5, 8, 8)
    reference.load_state_dict(model.state_dict())

    def loss_fn(m, batch):
        return torch.nn.functional.cross_entropy(m(batch["words"]).flatten(0, 1), batch["tags"].flatten())

    mnist_hogwild_train(model, iter(batches[:2]), loss_fn, [torch.optim.SGD(model.parameters(), lr=0.5)])
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    for batch in batches[:2]:  # the generator stopped after 2: the third batch is never trained
        optimizer.zero_grad()
        loss_fn(reference, batch).backward()
        optimizer.step()
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        assert torch.equal(mine, theirs)
