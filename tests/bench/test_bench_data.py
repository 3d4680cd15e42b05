"""bench/bench_data.py: the --quick run loads seeded synthetic corpora first and cached, times both batchers and
prints its command and the first/cached ratio."""
import re


def test_quick_run_loads_synthetic_corpora_and_prints_the_ratio_and_its_command(run_bench):
    done = run_bench("bench_data", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("command: python -m bench.bench_data --quick\n")
    assert "synthetic train: {'total': 2000, 'kept': 2000, 'dropped_empty': 0, 'dropped_long': 0, 'held_out': 0} " \
           "-> 2000 pairs" in done.stdout
    assert re.search(r"^first / cached: \d+x$", done.stdout, re.M)
    assert re.search(r"^NMT batcher \(B=64, bucketed\): +[\d,]+ tokens/s .*32 batches in", done.stdout, re.M)
    assert re.search(r"^POS batcher \(synthetic, B=1\): +[\d,]+ tokens/s \(1800 batches in", done.stdout, re.M)
