"""bench/bench_models.py: the --quick run times the small presets and prints its command and the ratios."""
import re


def test_quick_run_prints_each_configuration_its_ratio_to_the_first_and_its_command(run_bench):
    done = run_bench("bench_models", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^(\S+ B=\S+(?: full| encoder only)?) +\d+\.\d +(\d+\.\d\d) +1$", done.stdout, re.M)
    assert [name for name, _ in rows] == ["pos/small B=1x25", "pos/small B=16x25", "nmt/small B=64 full",
                                          "nmt/small B=64 encoder only"]
    assert rows[0][1] == "1.00"  # the first configuration is the unit of the ratios
    assert re.search(r"^# nmt/small: decoder \(step loop \+ readout \+ softmax\) = \d+% of the update$",
                     done.stdout, re.M)
    assert "# command: python -m bench.bench_models --quick" in done.stdout
