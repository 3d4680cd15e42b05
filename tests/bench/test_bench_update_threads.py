"""bench/bench_update_threads.py: the --quick run times the update thread for every thread count and optimizer and
prints the ratios and its command; bad thread lists are refused."""
import re

from bench import bench_update_threads
from tests.bench.usage_errors import assert_refused


def test_quick_run_prints_every_thread_count_its_ratio_and_the_command(run_bench):
    done = run_bench("bench_update_threads", "--quick", "--threads", "1,2")
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("sgd", "adam"):
        for count in (1, 2):
            assert re.search(rf"^  {name} .* {count} threads +\d+\.\d\d ms/update   x\d+\.\d\d against 1 thread",
                             done.stdout, re.M), (name, count)
    assert "automatic update threads for one GPU worker:" in done.stdout
    assert "command: python -m bench.bench_update_threads --quick --threads 1,2" in done.stdout


def test_bad_thread_lists_are_refused(capsys):
    for threads in ("0,2", "one", ""):
        assert_refused(bench_update_threads.main, ["--threads", threads], "--threads must list integers >= 1", capsys)
