import math

import numpy as np
import pytest

from gate import stats
from gate.stats import (
    StatsError,
    betainc,
    binom_cdf,
    bounded_mean_bounds,
    mean_bounds,
    order_statistics,
    proportion_bounds,
    quantile_bounds,
    quantile_ranks,
    quantile_with_bounds,
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


def test_confidence_outside_range_is_rejected():
    with pytest.raises(ValueError, match="confidence"):
        proportion_bounds(1, 10, confidence=1.0)


def test_order_statistics_fast_path_agrees_with_a_full_sort():
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


@pytest.mark.parametrize("slice_size", [4099, 1 << 20])
def test_order_statistics_agree_with_a_full_sort_whatever_the_split_slices(slice_size, monkeypatch):
    monkeypatch.setattr(stats, "_SPLIT_SLICE", slice_size)
    rng = np.random.default_rng(11)
    n = 300_001
    values = rng.gamma(4.0, 0.005, n).astype(np.float32)
    values[rng.integers(0, n, 50)] = np.nan  # sorts last, as np.sort puts it
    reference = np.sort(values)
    for ranks in ([0], [n // 2], [int(0.99 * n) - 7, int(0.99 * n)], [n - 60, n - 1]):
        got = order_statistics(values, ranks)
        want = {r: float(reference[r]) for r in ranks}
        assert got.keys() == want.keys()
        assert all(np.isnan(want[r]) if np.isnan(got[r]) else got[r] == want[r] for r in ranks)


@pytest.mark.parametrize("cuts", [(None, None), (0.3, None), (None, 0.6), (0.3, 0.6)])
def test_split_counts_below_and_keeps_the_middle_in_order(cuts, monkeypatch):
    monkeypatch.setattr(stats, "_SPLIT_SLICE", 1000)
    rng = np.random.default_rng(5)
    values = rng.random(10_001)
    values[::97] = np.nan
    lo, hi = cuts
    below, middle = stats._split(values, lo, hi)
    with np.errstate(invalid="ignore"):
        is_below = values < lo if lo is not None else np.zeros(len(values), dtype=bool)
        kept = ~is_below & ((values <= hi) if hi is not None else True)
    assert below == int(is_below.sum())
    np.testing.assert_array_equal(middle, values[kept])


# --- edges and exact values (each kills a mutant that the coverage tests cannot see) ----------


def test_betainc_edges_and_both_continued_fraction_branches():
    with pytest.raises(ValueError, match="a > 0"):
        betainc(0, 1, 0.5)
    with pytest.raises(ValueError, match="b > 0"):
        betainc(1, 0, 0.5)
    assert betainc(2, 3, 0.0) == 0.0 and betainc(2, 3, -0.1) == 0.0
    assert betainc(2, 3, 1.0) == 1.0 and betainc(2, 3, 1.1) == 1.0
    # I_x(2, 3) = P(Bin(4, x) >= 2), on both sides of the branch at (a + 1)/(a + b + 2) = 3/7
    for x in (0.05, 0.3, 0.42, 0.43, 0.7, 0.99):
        exact = 6 * x**2 * (1 - x) ** 2 + 4 * x**3 * (1 - x) + x**4
        assert betainc(2, 3, x) == pytest.approx(exact, rel=1e-12, abs=1e-15)
        assert betainc(3, 2, 1 - x) == pytest.approx(1 - exact, rel=1e-12, abs=1e-15)
    # large parameters: many continued-fraction terms, still exact to the binomial sum
    n, k, p = 2000, 30, 0.01
    direct = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
    assert binom_cdf(k, n, p) == pytest.approx(direct, rel=1e-10)


def test_stats_error_is_an_arithmetic_error():
    assert issubclass(StatsError, ArithmeticError)


def test_binomial_cdf_edges():
    assert binom_cdf(-1, 10, 0.5) == 0.0
    assert binom_cdf(10, 10, 0.5) == 1.0 and binom_cdf(11, 10, 0.5) == 1.0
    assert binom_cdf(0, 10, 0.0) == 1.0
    assert binom_cdf(9, 10, 1.0) == 0.0
    assert binom_cdf(0, 10, 0.5) == pytest.approx(0.5**10, rel=1e-12)
    assert binom_cdf(9, 10, 0.5) == pytest.approx(1 - 0.5**10, rel=1e-12)


def test_proportion_bounds_at_all_hits_and_no_hits_have_closed_forms():
    alpha, n = 0.05, 40
    all_hits = proportion_bounds(n, n, confidence=1 - alpha)
    assert all_hits.upper == 1.0
    assert all_hits.lower == pytest.approx(alpha ** (1 / n), rel=1e-9)  # P(n of n | p) = p^n
    none = proportion_bounds(0, n, confidence=1 - alpha)
    assert none.lower == 0.0
    assert none.upper == pytest.approx(1 - alpha ** (1 / n), rel=1e-9)
    assert none.confidence == 1 - alpha
    one = proportion_bounds(1, 1, confidence=0.9)
    assert (one.lower, one.upper) == (pytest.approx(0.1, rel=1e-9), 1.0)


@pytest.mark.parametrize("k, n", [(-1, 10), (11, 10), (0, 0), (1, 0)])
def test_proportion_bounds_reject_impossible_counts(k, n):
    with pytest.raises(ValueError, match="0 <= k <= n"):
        proportion_bounds(k, n, confidence=0.95)


def test_confidence_range_edges():
    assert proportion_bounds(1, 10, confidence=0.5).lower > 0
    for bad in (0.4999, 1.0, 1.5):
        with pytest.raises(ValueError, match="confidence"):
            proportion_bounds(1, 10, confidence=bad)
        with pytest.raises(ValueError, match="confidence"):
            mean_bounds(np.ones(5), confidence=bad)
        with pytest.raises(ValueError, match="confidence"):
            quantile_ranks(10, 0.5, confidence=bad)


def test_two_sided_level():
    assert two_sided(0.95) == pytest.approx(0.975)
    assert two_sided(0.9) == pytest.approx(0.95)


def _ranks_by_definition(n, q, alpha):
    # Largest l with P(B <= l - 1) <= alpha; smallest u with P(B >= u) <= alpha; B ~ Bin(n, q).
    def cdf(k):
        return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1))

    lows = [l_ for l_ in range(1, n + 1) if cdf(l_ - 1) <= alpha]
    ups = [u for u in range(1, n + 1) if 1 - cdf(u - 1) <= alpha]
    return (max(lows) if lows else None), (min(ups) if ups else None)


@pytest.mark.parametrize("n", [1, 3, 5, 20, 59, 60, 100])
@pytest.mark.parametrize("q", [0.07, 0.5, 0.9, 0.99])
def test_quantile_ranks_match_their_definition(n, q):
    assert quantile_ranks(n, q, confidence=0.95) == _ranks_by_definition(n, q, 0.05)


@pytest.mark.parametrize("near", [None, (0, 10), (500, 400), (-50, 10**9), (40, 41), (41, 42)])
def test_a_guessed_bracket_never_changes_the_search_result(near):
    # The answer is 41: a bracket that holds it narrows the search, any other is ignored.
    assert stats._smallest_k(100, lambda k: k >= 41, near=near) == 41


@pytest.mark.parametrize("n", [299, 10**4, 10**6, 33_000_000])
@pytest.mark.parametrize("q", [0.001, 0.5, 0.99, 0.999])
def test_quantile_ranks_with_the_normal_bracket_equal_the_full_search(n, q, monkeypatch):
    bracketed = quantile_ranks.__wrapped__(n, q, confidence=0.95)
    monkeypatch.setattr(stats, "_normal_bracket", lambda *args: (0, n + 1))
    assert quantile_ranks.__wrapped__(n, q, confidence=0.95) == bracketed


def test_quantile_ranks_of_nothing():
    assert quantile_ranks(0, 0.5, confidence=0.95) == (None, None)


def test_quantile_value_interpolates_between_ranks_like_numpy():
    rng = np.random.default_rng(3)
    for n in (2, 3, 7, 10, 101, 1000):
        values = rng.exponential(1.0, n)
        for q in (0.0, 0.1, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0):
            value, _ = quantile_with_bounds(values, q, confidence=0.95)
            assert value == pytest.approx(float(np.quantile(values, q)), rel=1e-12), (n, q)
    # one exact case: position 0.9 * 3 = 2.7 between 30 and 40
    value, _ = quantile_with_bounds(np.array([40.0, 10.0, 30.0, 20.0]), 0.9, confidence=0.95)
    assert value == pytest.approx(37.0)


def test_quantile_bounds_are_the_order_statistics_at_the_ranks():
    values = np.arange(100, 0, -1, dtype=np.float64)  # 1..100, reversed
    lower_rank, upper_rank = quantile_ranks(100, 0.5, confidence=0.95)
    _, bounds = quantile_with_bounds(values, 0.5, confidence=0.95)
    assert (bounds.lower, bounds.upper) == (float(lower_rank), float(upper_rank))
    assert bounds.confidence == 0.95
    assert quantile_bounds(values, 0.5, confidence=0.95) == bounds


def test_quantile_bounds_without_a_lower_or_upper_rank_are_infinite():
    values = np.array([3.0, 1.0, 2.0])
    # P(B = 0) = 0.125 > 0.05 for B ~ Bin(3, 0.5): no order statistic is surely below the median
    value, bounds = quantile_with_bounds(values, 0.5, confidence=0.95)
    assert value == 2.0
    assert bounds.lower == -math.inf and bounds.upper == math.inf
    _, low_only = quantile_with_bounds(np.arange(1.0, 11.0), 0.99, confidence=0.95)
    assert low_only.upper == math.inf and low_only.lower == 9.0  # P(B <= 8) <= 0.05 < P(B <= 9)


def test_quantile_of_no_samples():
    value, bounds = quantile_with_bounds(np.array([]), 0.5, confidence=0.9)
    assert math.isnan(value)
    assert (bounds.lower, bounds.upper, bounds.confidence) == (-math.inf, math.inf, 0.9)


def test_order_statistics_small_and_empty():
    values = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    assert order_statistics(values, []) == {}
    assert order_statistics(values, [4, 0, 0, 2]) == {0: 1.0, 2: 3.0, 4: 5.0}


# --- mean -------------------------------------------------------------------------------------


def test_mean_bounds_of_too_few_or_constant_values():
    for values in (np.array([]), np.array([2.0])):
        b = mean_bounds(values, confidence=0.95)
        assert (b.lower, b.upper, b.confidence) == (-math.inf, math.inf, 0.95)
    b = mean_bounds(np.full(10, 3.0), confidence=0.95)
    assert (b.lower, b.upper) == (3.0, 3.0)


def test_mean_bounds_are_deterministic_and_scale_with_the_data():
    rng = np.random.default_rng(5)
    for n in (20, 200, 3000):  # bootstrap, bootstrap, Hall's correction
        values = rng.lognormal(0.0, 1.0, n)
        first = mean_bounds(values, confidence=0.95)
        assert mean_bounds(values.copy(), confidence=0.95) == first
        scaled = mean_bounds(values * 1000.0, confidence=0.95)
        assert scaled.lower == pytest.approx(first.lower * 1000.0, rel=1e-9)
        assert scaled.upper == pytest.approx(first.upper * 1000.0, rel=1e-9)
        assert first.lower < float(np.mean(values)) < first.upper


def test_mean_bounds_on_right_skewed_data_reach_further_up_than_down():
    values = np.random.default_rng(6).lognormal(0.0, 1.0, 50)
    b = mean_bounds(values, confidence=0.95)
    mean = float(np.mean(values))
    assert b.upper - mean > 1.3 * (mean - b.lower)
    # wider than the Student-t bound, which is what under-covered (t(0.95, 49) = 1.6766)
    t_half = 1.6766 * float(np.std(values, ddof=1)) / math.sqrt(50)
    assert b.upper > mean + t_half


def test_mean_bounds_on_symmetric_data_are_close_to_student_t():
    rng = np.random.default_rng(9)
    for n, t_quantile in ((30, 1.699), (2000, 1.645)):  # bootstrap; Hall's (skew ~0: normal)
        values = rng.normal(0.0, 1.0, n)  # negative values: the bootstrap alone
        b = mean_bounds(values, confidence=0.95)
        mean, se = float(np.mean(values)), float(np.std(values, ddof=1)) / math.sqrt(n)
        assert (b.upper - mean) / se == pytest.approx(t_quantile, rel=0.12)
        assert (mean - b.lower) / se == pytest.approx(t_quantile, rel=0.12)


def test_mean_bounds_of_data_with_negative_values_use_the_bootstrap_alone():
    values = np.random.default_rng(8).normal(0.0, 1.0, 40)
    shifted = mean_bounds(values + 100.0, confidence=0.95)  # positive: the pivot joins in
    plain = mean_bounds(values, confidence=0.95)  # some negative: bootstrap only
    assert plain.upper + 100.0 <= shifted.upper + 1e-9
    assert plain.lower + 100.0 >= shifted.lower - 1e-9
    assert plain.lower < float(np.mean(values)) < plain.upper


def test_mean_bounds_with_too_few_resamples_for_the_level_are_infinite():
    b = mean_bounds(np.arange(1.0, 21.0), confidence=0.9995)  # alpha * 1000 < 1
    assert (b.lower, b.upper) == (-math.inf, math.inf)


def test_mean_bounds_of_two_points_are_infinite_upward():
    # Half of the resamples of two values are constant: the bootstrap cannot bound the mean.
    b = mean_bounds(np.array([1.0, 2.0]), confidence=0.95)
    assert b.upper == math.inf and b.lower == -math.inf


def test_bounded_mean_of_yes_no_values_is_clopper_pearson():
    values = np.array([1.0] * 37 + [0.0] * 3)
    b = bounded_mean_bounds(values, low=0.0, high=1.0, confidence=0.95)
    cp = proportion_bounds(37, 40, confidence=0.95)
    assert (b.lower, b.upper) == (pytest.approx(cp.lower), pytest.approx(cp.upper))
    # and on another range: 2 at `high` out of 4
    b = bounded_mean_bounds(np.array([5.0, 7.0, 5.0, 7.0]), low=5.0, high=7.0, confidence=0.9)
    cp = proportion_bounds(2, 4, confidence=0.9)
    assert b.lower == pytest.approx(5 + 2 * cp.lower) and b.upper == pytest.approx(5 + 2 * cp.upper)


def test_bounded_mean_of_values_inside_the_range_is_empirical_bernstein():
    values = np.array([0.2, 0.4, 0.6, 0.8] * 25)
    b = bounded_mean_bounds(values, low=0.0, high=1.0, confidence=0.95)
    log_term = math.log(2 / 0.05)
    half = math.sqrt(2 * np.var(values, ddof=1) * log_term / 100) + 7 * log_term / (3 * 99)
    assert b.lower == pytest.approx(0.5 - half) and b.upper == pytest.approx(0.5 + half)
    scaled = bounded_mean_bounds(values * 10 + 1, low=1.0, high=11.0, confidence=0.95)
    assert scaled.lower == pytest.approx(1 + 10 * b.lower)
    clipped = bounded_mean_bounds(np.array([0.99, 1.0, 0.98]), low=0, high=1, confidence=0.95)
    assert clipped.upper == 1.0 and 0.0 <= clipped.lower < 0.98


def test_bounded_mean_edges():
    empty = bounded_mean_bounds(np.array([]), low=0.0, high=2.0, confidence=0.95)
    assert (empty.lower, empty.upper) == (0.0, 2.0)
    single = bounded_mean_bounds(np.array([0.5]), low=0.0, high=2.0, confidence=0.95)
    assert (single.lower, single.upper) == (0.0, 2.0)
    with pytest.raises(ValueError, match="low < high"):
        bounded_mean_bounds(np.array([1.0]), low=1.0, high=1.0, confidence=0.95)
    with pytest.raises(ValueError, match="outside"):
        bounded_mean_bounds(np.array([0.5, 1.5]), low=0.0, high=1.0, confidence=0.95)
    with pytest.raises(ValueError, match="outside"):
        bounded_mean_bounds(np.array([-0.5]), low=0.0, high=1.0, confidence=0.95)
