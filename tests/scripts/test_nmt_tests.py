"""scripts.nmt_tests' paired bootstrap: sacreBLEU's p-values, and the smallest difference the same test calls
significant, computed on the very resamples sacreBLEU draws."""
import random

import pytest

from scripts.nmt_tests import paired_bootstrap, resampled_differences, smallest_significant

WORDS = "the a house cat dog runs sleeps red big small on under table garden".split()


def _corpus(sentences=60, seed=0):
    """Seeded references and three systems: each drops a different share of the reference words."""
    rng = random.Random(seed)
    references = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) for _ in range(sentences)]

    def dropping(every):
        return [" ".join(w for i, w in enumerate(line.split()) if i % every) for line in references]

    return references, [("baseline", dropping(3)), ("close", dropping(4)), ("far", dropping(2))]


def test_the_resamples_are_sacrebleus_own():
    """The p-value recomputed from resampled_differences is sacreBLEU's, to the last digit, for every system."""
    references, systems = _corpus()
    rows, signature = paired_bootstrap(references, systems, samples=200, seed=7)
    assert "bs:200" in signature and "seed:7" in signature
    for row, centered, (name, hypotheses) in zip(rows[1:], resampled_differences(references, systems, 200, 7),
                                                  systems[1:]):
        real = abs(row["bleu"] - rows[0]["bleu"])
        assert row["system"] == name
        assert row["p_value"] == pytest.approx((int((centered > real).sum()) + 1) / (200 + 1), abs=1e-12)


def test_the_detectable_difference_is_the_threshold_of_p_below_alpha():
    references, systems = _corpus()
    rows, _ = paired_bootstrap(references, systems, samples=200, seed=7)
    assert rows[0]["detectable"] is None  # the baseline
    for row, centered in zip(rows[1:], resampled_differences(references, systems, 200, 7)):
        d = row["detectable"]
        assert d > 0
        assert (int((centered > d).sum()) + 1) / 201 < 0.05  # a real difference of d is significant
        assert (int((centered > d - 1e-4).sum()) + 1) / 201 >= 0.05  # anything smaller is not
        # and the reported verdict agrees with it
        assert (row["p_value"] < 0.05) == (abs(row["bleu"] - rows[0]["bleu"]) >= d)


def test_smallest_significant_on_exact_values():
    assert smallest_significant(list(range(20))) == 19  # p = 1/21 < 0.05 only above every other resample
    assert smallest_significant(list(range(40))) == 38  # 2/41 < 0.05 <= 3/41
    assert smallest_significant(list(range(10))) is None  # p is at least 1/11: nothing is significant
    assert smallest_significant([0.0] * 999 + [5.0]) == 0.0  # one resample above 0.0: p = 2/1001
