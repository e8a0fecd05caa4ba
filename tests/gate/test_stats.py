import math

import numpy as np
import pytest

from gate.stats import (
    betainc,
    binom_cdf,
    mean_bounds,
    proportion_bounds,
    quantile_bounds,
    quantile_ranks,
    two_sided,
)


def test_betainc_matches_closed_forms():
    # I_x(1, 1) = x;  I_x(a, 1) = x**a;  I_x(1, b) = 1 - (1 - x)**b
    assert math.isclose(betainc(1, 1, 0.3), 0.3, rel_tol=1e-12)
    assert math.isclose(betainc(3, 1, 0.4), 0.4**3, rel_tol=1e-12)
    assert math.isclose(betainc(1, 5, 0.2), 1 - 0.8**5, rel_tol=1e-12)


def test_binomial_cdf_matches_a_direct_sum():
    n, p = 40, 0.13
    for k in (0, 3, 5, 12, 39):
        direct = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert math.isclose(binom_cdf(k, n, p), direct, rel_tol=1e-10, abs_tol=1e-14)


def test_a_p99_needs_299_clean_samples_to_pass_at_95_percent():
    assert proportion_bounds(0, 299, confidence=0.95).upper < 0.01
    assert proportion_bounds(0, 298, confidence=0.95).upper > 0.01


def test_clopper_pearson_bounds_invert_the_binomial_tails():
    k, n, alpha = 7, 120, 0.05
    bounds = proportion_bounds(k, n, confidence=1 - alpha)
    assert math.isclose(1 - binom_cdf(k - 1, n, bounds.lower), alpha, rel_tol=1e-6)
    assert math.isclose(binom_cdf(k, n, bounds.upper), alpha, rel_tol=1e-6)


def test_quantile_interval_covers_the_true_p99_in_at_least_93_percent_of_samples():
    rng = np.random.default_rng(7)
    true_p99 = -math.log(0.01)  # exponential(1)
    repeats, covered = 400, 0
    for _ in range(repeats):
        sample = rng.exponential(1.0, 600)
        bounds = quantile_bounds(sample, 0.99, confidence=two_sided(0.95))
        covered += bounds.lower <= true_p99 <= bounds.upper
    assert covered / repeats >= 0.93


def test_quantile_ranks_need_enough_samples_for_an_upper_bound():
    assert quantile_ranks(10, 0.99, confidence=0.95)[1] is None
    assert quantile_ranks(299, 0.99, confidence=0.95)[1] == 299


def test_mean_bounds_use_student_t():
    bounds = mean_bounds(np.array([1.0, 2.0, 3.0, 4.0]), confidence=0.95)
    # t(0.95, 3) = 2.3534; s/sqrt(n) = 0.6455
    assert bounds.lower == pytest.approx(2.5 - 2.3534 * 0.6455, abs=1e-3)
    assert bounds.upper == pytest.approx(2.5 + 2.3534 * 0.6455, abs=1e-3)


def test_confidence_outside_range_is_rejected():
    with pytest.raises(ValueError, match="confidence"):
        proportion_bounds(1, 10, confidence=1.0)


def test_order_statistics_fast_path_agrees_with_a_full_sort():
    from gate.stats import order_statistics

    rng = np.random.default_rng(7)
    n = 300_000  # above the size where the sampled selection is used
    arrays = [
        rng.gamma(4.0, 0.005, n).astype(np.float32),
        rng.integers(0, 50, n).astype(np.float64),  # heavy ties
        np.sort(rng.random(n)),  # already ordered: the strided sample sees a pattern
        np.full(n, 3.0),
    ]
    for values in arrays:
        reference = np.sort(values)
        for ranks in (
            [0],
            [n - 1],
            [n // 2, n // 2 + 1],
            [int(0.99 * n) - 40, int(0.99 * n)],
            [5, n - 5],
        ):
            got = order_statistics(values, ranks)
            assert got == {r: float(reference[r]) for r in ranks}
