"""gate.stats against exact references computed here with fractions: the incomplete beta and
binomial tails to 1e-12, Clopper-Pearson bounds that put exactly alpha in the tail, quantile
ranks against a brute-force search, the empirical Bernstein bound's formula, and the argument
checks with their messages."""

from __future__ import annotations

import math
from fractions import Fraction

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
    quantile_ranks,
    quantile_with_bounds,
    two_sided,
)


def _exact_cdf(k: int, n: int, p: Fraction) -> float:
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)))


_CASES = [
    (k, n, p)
    for n in (1, 2, 5, 17, 60, 300)
    for k in sorted({0, 1, n // 3, n // 2, n - 2, n - 1} - {-1})
    if 0 <= k < n
    for p in (
        Fraction(1, 1000),
        Fraction(1, 20),
        Fraction(1, 2),
        Fraction(9, 10),
        Fraction(99, 100),
    )
]


@pytest.mark.parametrize(("k", "n", "p"), _CASES)
def test_binom_cdf_is_the_exact_binomial_sum(k: int, n: int, p: Fraction) -> None:
    exact = _exact_cdf(k, n, p)
    assert binom_cdf(k, n, float(p)) == pytest.approx(exact, rel=1e-11, abs=1e-300)


def test_binom_cdf_edges() -> None:
    assert binom_cdf(-1, 10, 0.5) == 0.0
    assert binom_cdf(10, 10, 0.5) == 1.0 and binom_cdf(11, 10, 0.5) == 1.0
    assert binom_cdf(3, 10, 0.0) == 1.0 and binom_cdf(3, 10, -0.1) == 1.0
    assert binom_cdf(3, 10, 1.0) == 0.0 and binom_cdf(3, 10, 1.1) == 0.0
    assert binom_cdf(0, 10, 0.5) == pytest.approx(0.5**10, rel=1e-12)


@pytest.mark.parametrize("x", [1e-6, 0.01, 0.2, 0.37, 0.5, 0.63, 0.8, 0.99, 1 - 1e-6])
@pytest.mark.parametrize("a", [0.5, 1.0, 2.5, 7.0, 40.0])
def test_betainc_closed_forms(x: float, a: float) -> None:
    # I_x(a, 1) = x^a and I_x(1, a) = 1 - (1 - x)^a; both branches of the continued fraction.
    assert betainc(a, 1.0, x) == pytest.approx(x**a, rel=1e-12, abs=1e-300)
    assert betainc(1.0, a, x) == pytest.approx(-math.expm1(a * math.log1p(-x)), rel=1e-12)


@pytest.mark.parametrize("x", [1e-8, 0.001, 0.1, 0.5, 0.9, 0.999])
def test_betainc_arcsine(x: float) -> None:
    assert betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), rel=1e-12)


def test_betainc_symmetry_at_large_parameters() -> None:
    for a, b, x in [(500.0, 300.0, 0.6), (3000.0, 20.0, 0.99), (20.0, 3000.0, 0.01)]:
        assert betainc(a, b, x) + betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-12)


def test_betainc_domain() -> None:
    assert betainc(2.0, 3.0, 0.0) == 0.0 and betainc(2.0, 3.0, -1.0) == 0.0
    assert betainc(2.0, 3.0, 1.0) == 1.0 and betainc(2.0, 3.0, 2.0) == 1.0
    for a, b in [(0.0, 1.0), (1.0, 0.0), (-1.0, 2.0)]:
        with pytest.raises(ValueError, match=r"^betainc needs a > 0 and b > 0$"):
            betainc(a, b, 0.5)


def test_the_continued_fraction_fails_loudly_when_it_does_not_converge(monkeypatch) -> None:
    monkeypatch.setattr(stats, "_EPS", 0.0)  # nothing ever converges to 0
    with pytest.raises(StatsError, match=r"^incomplete beta did not converge for a=2.0, b=3.0"):
        betainc(2.0, 3.0, 0.3)


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (7, 300)])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.999])
def test_clopper_pearson_bounds_leave_exactly_alpha_in_the_tail(k, n, confidence) -> None:
    b = proportion_bounds(k, n, confidence=confidence)
    alpha = 1.0 - confidence
    assert b.confidence == confidence
    if k == 0:
        assert b.lower == 0.0
    else:  # P(B >= k | p = lower) = alpha
        assert 1.0 - binom_cdf(k - 1, n, b.lower) == pytest.approx(alpha, rel=1e-9)
    if k == n:
        assert b.upper == 1.0
    else:  # P(B <= k | p = upper) = alpha
        assert binom_cdf(k, n, b.upper) == pytest.approx(alpha, rel=1e-9)
    assert 0.0 <= b.lower <= k / n <= b.upper <= 1.0


def test_clopper_pearson_known_values() -> None:
    # Zero failures in n: the upper bound is 1 - alpha^(1/n) (the "rule of three").
    b = proportion_bounds(0, 299, confidence=0.95)
    assert b.upper == pytest.approx(1 - 0.05 ** (1 / 299), rel=1e-12)
    b = proportion_bounds(299, 299, confidence=0.95)
    assert b.lower == pytest.approx(0.05 ** (1 / 299), rel=1e-12)


@pytest.mark.parametrize(("k", "n"), [(-1, 5), (6, 5), (0, 0), (1, -1)])
def test_proportion_bounds_refuse_impossible_counts(k: int, n: int) -> None:
    with pytest.raises(ValueError, match=r"^need 0 <= k <= n and n > 0, got k=.*, n=.*$"):
        proportion_bounds(k, n, confidence=0.95)


@pytest.mark.parametrize("confidence", [0.4999, 1.0, 1.5, -0.2])
def test_confidence_must_lie_in_half_to_one(confidence: float) -> None:
    with pytest.raises(ValueError, match=r"^confidence must lie in \[0.5, 1\), got "):
        proportion_bounds(1, 2, confidence=confidence)
    with pytest.raises(ValueError, match="confidence must lie"):
        quantile_ranks(10, 0.5, confidence=confidence)
    with pytest.raises(ValueError, match="confidence must lie"):
        mean_bounds(np.array([1.0, 2.0]), confidence=confidence)
    with pytest.raises(ValueError, match="confidence must lie"):
        bounded_mean_bounds(np.array([0.5]), low=0, high=1, confidence=confidence)


def _brute_ranks(n: int, q: float, alpha: float) -> tuple[int | None, int | None]:
    p = Fraction(q)
    pmf = [math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(n + 1)]
    cdf, total = [], Fraction(0)
    for term in pmf:
        total += term
        cdf.append(float(total))
    lowers = [l_ for l_ in range(1, n + 1) if cdf[l_ - 1] <= alpha]
    uppers = [u for u in range(1, n + 1) if 1.0 - cdf[u - 1] <= alpha]
    return (max(lowers) if lowers else None), (min(uppers) if uppers else None)


@pytest.mark.parametrize("n", [1, 2, 5, 20, 59, 60, 100, 299, 300])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_quantile_ranks_match_a_brute_force_search(n: int, q: float, confidence: float) -> None:
    quantile_ranks.cache_clear()
    assert quantile_ranks(n, q, confidence=confidence) == _brute_ranks(n, q, 1.0 - confidence)


def test_quantile_ranks_of_no_data() -> None:
    assert quantile_ranks(0, 0.5, confidence=0.95) == (None, None)
    assert quantile_ranks(-3, 0.5, confidence=0.95) == (None, None)


def test_a_p99_needs_299_samples_for_an_upper_bound() -> None:
    assert quantile_ranks(298, 0.99, confidence=0.95)[1] is None
    assert quantile_ranks(299, 0.99, confidence=0.95)[1] == 299


def test_the_search_bracket_saves_evaluations(monkeypatch) -> None:
    # The normal-approximation bracket is an optimisation only (any bracket gives the same
    # ranks, as the brute-force test shows); it must still cut the incomplete-beta
    # evaluations of a large n to 16, where a search of the whole range takes 40.
    calls: list[tuple] = []
    real = stats.binom_cdf
    monkeypatch.setattr(stats, "binom_cdf", lambda *a: calls.append(a) or real(*a))
    quantile_ranks.cache_clear()
    ranks = quantile_ranks(1_000_000, 0.99, confidence=0.95)
    assert len(calls) == 16
    calls.clear()
    monkeypatch.setattr(stats, "_normal_bracket", lambda n, q, z: (0, 0))
    assert quantile_ranks.__wrapped__(1_000_000, 0.99, confidence=0.95) == ranks
    assert len(calls) == 40
    quantile_ranks.cache_clear()


def test_two_sided() -> None:
    assert two_sided(0.9) == pytest.approx(0.95) and two_sided(0.5) == 0.75


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101])
@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.9, 0.99, 1.0])
def test_the_sample_quantile_is_numpys_linear_interpolation(n: int, q: float) -> None:
    values = np.random.default_rng(n).normal(size=n) ** 3
    value, bounds = quantile_with_bounds(values, q, confidence=0.9)
    assert value == pytest.approx(float(np.quantile(values, q)), rel=1e-12, abs=1e-15)
    lower, upper = quantile_ranks(n, q, confidence=0.9)
    ordered = np.sort(values)
    assert bounds.lower == (ordered[lower - 1] if lower else -math.inf)
    assert bounds.upper == (ordered[upper - 1] if upper else math.inf)
    assert bounds.confidence == 0.9


def test_no_samples_no_quantile() -> None:
    value, bounds = quantile_with_bounds(np.array([]), 0.5, confidence=0.95)
    assert math.isnan(value) and (bounds.lower, bounds.upper) == (-math.inf, math.inf)
    values = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (
        stats.quantile_bounds(values, 0.5, confidence=0.6)
        == quantile_with_bounds(values, 0.5, confidence=0.6)[1]
    )


@pytest.mark.parametrize("ranks", [[0], [5], [299_999], [150_000, 297_000], [1, 299_998], []])
def test_order_statistics_of_a_large_array_equal_a_full_sort(ranks: list[int]) -> None:
    values = np.random.default_rng(1).lognormal(size=300_000)
    ordered = np.sort(values)
    assert order_statistics(values, ranks) == {r: float(ordered[r]) for r in ranks}


def test_order_statistics_with_ties_and_nan_equal_a_full_sort() -> None:
    rng = np.random.default_rng(2)
    values = rng.integers(0, 50, size=300_000).astype(np.float64)
    values[::1000] = np.nan
    ranks = [0, 1000, 150_000, 296_000, 299_000]
    ordered = np.sort(values)  # NaN last, as np.partition puts it
    got = order_statistics(values, ranks)
    for r in ranks:
        assert (math.isnan(got[r]) and math.isnan(ordered[r])) or got[r] == ordered[r]


def test_split_counts_below_and_keeps_the_middle(monkeypatch) -> None:
    monkeypatch.setattr(stats, "_SPLIT_SLICE", 4)  # several slices
    values = np.array([5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, np.nan])
    below, middle = stats._split(values, 3.0, 7.0)
    assert below == 2 and sorted(middle.tolist()) == [3.0, 4.0, 5.0, 6.0, 7.0]
    below, middle = stats._split(values, None, 4.0)
    assert below == 0 and sorted(middle.tolist()) == [1.0, 2.0, 3.0, 4.0]
    below, middle = stats._split(values, 8.0, None)
    assert below == 7 and middle[:2].tolist() == [9.0, 8.0] and math.isnan(middle[2])
    below, middle = stats._split(values[:3], None, None)
    assert below == 0 and middle.tolist() == [5.0, 1.0, 9.0]
    below, middle = stats._split(values[:0], 1.0, 2.0)
    assert below == 0 and len(middle) == 0


def test_bounded_mean_of_two_valued_data_is_clopper_pearson() -> None:
    x = np.array([0.0] * 7 + [2.0] * 3)
    b = bounded_mean_bounds(x, low=0.0, high=2.0, confidence=0.95)
    share = proportion_bounds(3, 10, confidence=0.95)
    assert (b.lower, b.upper) == (2.0 * share.lower, 2.0 * share.upper)
    b = bounded_mean_bounds(np.array([1.0, 3.0, 3.0]), low=1.0, high=3.0, confidence=0.9)
    share = proportion_bounds(2, 3, confidence=0.9)
    assert (b.lower, b.upper) == (1.0 + 2.0 * share.lower, 1.0 + 2.0 * share.upper)


def test_bounded_mean_is_the_empirical_bernstein_bound() -> None:
    x = np.array([0.2, 0.4, 0.4, 0.5, 0.3, 0.35, 0.45, 0.25])
    low, high, confidence = -1.0, 3.0, 0.9
    alpha, n = 0.1, len(x)
    scaled = (x - low) / (high - low)
    log_term = math.log(2.0 / alpha)
    half = math.sqrt(2.0 * float(np.var(scaled, ddof=1)) * log_term / n)
    half += 7.0 * log_term / (3.0 * (n - 1))
    centre = float(np.mean(scaled))
    b = bounded_mean_bounds(x, low=low, high=high, confidence=confidence)
    assert b.lower == pytest.approx(low + 4.0 * max(centre - half, 0.0), rel=1e-12)
    assert b.upper == pytest.approx(low + 4.0 * min(centre + half, 1.0), rel=1e-12)
    assert b.confidence == confidence
    wide = bounded_mean_bounds(np.array([0.1, 0.9]), low=0.0, high=1.0, confidence=0.99)
    assert (wide.lower, wide.upper) == (0.0, 1.0)  # clipped to the range


def test_bounded_mean_edges() -> None:
    assert bounded_mean_bounds(np.array([]), low=1, high=2, confidence=0.9).upper == 2
    one = bounded_mean_bounds(np.array([1.5]), low=1, high=2, confidence=0.9)
    assert (one.lower, one.upper) == (1, 2)
    with pytest.raises(ValueError, match=r"^need low < high, got \[2, 2\]$"):
        bounded_mean_bounds(np.array([2.0]), low=2, high=2, confidence=0.9)
    with pytest.raises(ValueError, match=r"^values outside the declared range \[0, 1\]$"):
        bounded_mean_bounds(np.array([0.5, 1.5]), low=0, high=1, confidence=0.9)
    with pytest.raises(ValueError, match="outside"):
        bounded_mean_bounds(np.array([-0.5, 0.5]), low=0, high=1, confidence=0.9)


def test_mean_bounds_edges() -> None:
    one = mean_bounds(np.array([3.0]), confidence=0.95)
    assert (one.lower, one.upper) == (-math.inf, math.inf)
    flat = mean_bounds(np.array([2.0, 2.0, 2.0]), confidence=0.95)
    assert (flat.lower, flat.upper, flat.confidence) == (2.0, 2.0, 0.95)


# Fixed data, fixed bounds: the bounds are deterministic (seeded resampling), so the same run
# always gets the same verdict; these pin the bootstrap-t (n <= 1000), Hall's correction (above)
# and the lognormal pivot (positive data), each at a level where alpha * 1000 resolves and one
# where it does not (0.9995: no bootstrap bound at n <= 1000).
_RNG = np.random.default_rng(7)
_DATA = {
    "lognormal20": _RNG.lognormal(0, 1, 20),
    "signed20": _RNG.normal(1, 2, 20),
    "lognormal1500": _RNG.lognormal(0, 0.8, 1500),
    "signed1500": _RNG.normal(0, 1, 1500) ** 3,
    "pair": np.array([1.0, 3.0]),
    "ints": np.array([1, 2, 3, 4, 10]),
}
_INF = math.inf
_GOLDEN = [
    ("lognormal20", 0.9, 0.7633874494782339, 1.3487902967122696),
    ("lognormal20", 0.999, 0.4564821562644621, 3.110520877345625),
    ("lognormal20", 0.9995, -_INF, _INF),
    ("signed20", 0.9, -0.556697168602039, 0.5449988009582578),
    ("signed20", 0.999, -1.2942095148213417, 1.3111696051998698),
    ("signed20", 0.9995, -_INF, _INF),
    ("lognormal1500", 0.9, 1.2931347431902807, 1.3811073371122349),
    ("lognormal1500", 0.999, 1.2361956707239092, 1.4469849162369983),
    ("lognormal1500", 0.9995, 1.231900145249988, 1.4547276261778694),
    ("signed1500", 0.9, -0.14403103695885883, 0.10426823077991376),
    ("signed1500", 0.999, -0.33446004431284754, 0.26685592552951176),
    ("signed1500", 0.9995, -0.35644565262691674, 0.2842959523933137),
    ("pair", 0.9, -_INF, _INF),
    ("pair", 0.999, -_INF, _INF),
    ("ints", 0.9, 2.3401499944825357, 15.80316784005627),
    ("ints", 0.999, -2.3245553203367564, _INF),
]


@pytest.mark.parametrize(("name", "confidence", "lower", "upper"), _GOLDEN)
def test_mean_bounds_of_fixed_data(name: str, confidence: float, lower: float, upper: float):
    b = mean_bounds(_DATA[name], confidence=confidence)
    assert b.lower == pytest.approx(lower, rel=1e-9)
    assert b.upper == pytest.approx(upper, rel=1e-9)
    assert b.confidence == confidence


def test_mean_bounds_never_nan_and_never_overflow() -> None:
    # Two samples at a high level: the lognormal pivot's quantile is past exp's range (was an
    # OverflowError); five small integers: resamples on the mean have no spread and a pivot of
    # 0 (was NaN, from sign(0) * inf, which became a NaN lower bound).
    for x in (np.array([1.0, 3.0]), np.array([1, 2, 3, 4, 10]), np.array([0.5, 0.5, 0.7])):
        for confidence in (0.9, 0.99, 0.999):
            b = mean_bounds(x, confidence=confidence)
            assert not math.isnan(b.lower) and not math.isnan(b.upper)
            assert b.lower <= float(np.mean(x)) <= b.upper
