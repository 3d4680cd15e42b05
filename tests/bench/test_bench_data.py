"""bench/bench_data.py: the --quick run starts run.py's NMT job cold under the probe (bench/startup_probe.py) on a
synthetic corpus and reports its figures, the batch-building time and a graphed worker's time to learn its batches'
shapes; the least-squares line behind the slopes."""
import re

import pytest

from bench.bench_data import line


def test_quick_run_starts_a_job_cold_and_reports_its_figures_and_command(run_bench):
    done = run_bench("bench_data", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith("command: python -m bench.bench_data --quick\n")
    figures = re.search(r"^2,000 pairs, cold: ready s ([\d.]+), CPU s ([\d.]+), parent peak GiB ([\d.]+), all PSS GiB "
                        r"([\d.]+), cache MiB ([\d.]+), store MiB ([\d.]+)$", done.stdout, re.M)
    assert figures, done.stdout
    ready, cpu, parent, everything, cache, store = map(float, figures.groups())
    assert ready > 0 and cpu > 0 and 0.05 < parent <= everything and cache > 0.01 and store > 0
    assert re.search(r"^\| 2,000 \| cold \| [\d.]+ \|", done.stdout, re.M)
    assert re.search(r"^a worker builds a training batch \(B=64\) from the 2,000-pair cache in [\d.]+ ms of CPU$",
                     done.stdout, re.M)
    assert re.search(r"^a graphed worker learns the \d+ shapes of its [\d,]+ batches from the 2,000-pair cache in "
                     r"[\d.]+ s of CPU from the BatchSet's offsets, [\d.]+ s by building every batch \(before\): "
                     r"[\d.]+x$", done.stdout, re.M)


def test_the_line_through_the_sizes():
    assert line([(0.2, 1.0), (1.0, 3.0), (2.0, 5.5)]) == pytest.approx((0.5, 2.5))  # on the line y = 0.5 + 2.5 x
    assert line([(0, 0), (1, 1), (2, 0)]) == pytest.approx((1 / 3, 0))
