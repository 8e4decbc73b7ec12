"""Ablation statistics against values worked out by hand (and scipy where it is installed)."""

from __future__ import annotations

import statistics

import pytest

from kernelpro.results.stats import PAIRED_TEST, bootstrap_ci, sign_test


def test_sign_test_known_values():
    t = sign_test([2.0] * 10, [1.0] * 10)
    assert (t.n, t.wins, t.losses, t.ties) == (10, 10, 0, 0)
    assert t.p == pytest.approx(2 / 1024)                      # 2 * 0.5**10
    t = sign_test([2] * 8 + [0] * 2, [1] * 10)
    assert t.p == pytest.approx(2 * (45 + 10 + 1) / 1024)      # 2 * P(X >= 8), X ~ Bin(10, 1/2) = 0.109375
    t = sign_test([1, 2, 3, 5], [1, 1, 4, 5])
    assert (t.n, t.wins, t.losses, t.ties) == (2, 1, 1, 2) and t.p == 1.0
    assert sign_test([1.0], [1.0]).p is None
    assert sign_test([1.0, 1.004], [1.001, 1.0], rel_tol=0.01).ties == 2
    assert "sign test" in t.method and t.method == PAIRED_TEST
    with pytest.raises(ValueError):
        sign_test([1], [1, 2])


def test_sign_test_matches_scipy_binomtest():
    scipy_stats = pytest.importorskip("scipy.stats")
    for wins, losses in [(7, 3), (12, 2), (5, 5), (0, 9)]:
        t = sign_test([1] * wins + [0] * losses, [0.5] * (wins + losses))
        assert t.p == pytest.approx(scipy_stats.binomtest(wins, wins + losses, 0.5).pvalue)


def test_bootstrap_ci_brackets_the_statistic_and_is_seeded():
    xs = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9]
    lo, hi = bootstrap_ci(xs, statistics.mean, resamples=4000)
    assert lo < statistics.mean(xs) < hi
    # the mean's standard error here is ~0.09, so a 95% interval is about +-0.18 around 1.45
    assert 1.2 < lo < 1.35 and 1.55 < hi < 1.7
    assert bootstrap_ci(xs, statistics.mean, resamples=4000) == (lo, hi)
    assert bootstrap_ci([3.0]) == (3.0, 3.0) and bootstrap_ci([]) is None
    assert bootstrap_ci([2.0] * 5) == (2.0, 2.0)
