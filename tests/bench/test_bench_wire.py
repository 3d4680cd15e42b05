"""bench/bench_wire.py: its table (the ratio of bytes per exchange to fp32 of the same seed, the accuracy's spread
over the seeds) and its refusals; its runs are bench_links.run_one's (tests/bench/test_bench_links.py)."""
from bench import bench_wire
from tests.bench.usage_errors import assert_refused


def test_the_table_gives_each_wire_its_ratio_to_fp32_of_the_same_seed_and_the_spread_of_the_seeds():
    rows = [{"algorithm": "easgd", "wire": wire, "seed": seed, "exit": 0, "bytes_per_exchange": size,
             "metric": accuracy} for wire, seed, size, accuracy in (
                 ("fp32", 1, 8000.0, 0.91), ("bf16", 1, 4100.0, 0.90), ("fp32", 2, 6000.0, 0.93),
                 ("bf16", 2, 3300.0, 0.92))]
    lines = bench_wire.table(rows).splitlines()
    assert lines[1].split() == ["easgd", "fp32", "7000", "1.00", "0.9200", "(0.9100-0.9300)", "0,0"]
    assert lines[2].split() == ["easgd", "bf16", "3700", "0.53", "0.9100", "(0.9000-0.9200)", "0,0"]


def test_bad_arguments_are_refused(capsys):
    assert_refused(bench_wire.main, ["--wires", "bf16,fp32"], "fp32 first", capsys)
    assert_refused(bench_wire.main, ["--algorithms", "gossip"], "--algorithms from", capsys)
    assert_refused(bench_wire.main, ["--seeds", "one"], "--seeds: integers", capsys)
