"""`assess` on exact samples: percentile gates on exceedance counts, mean gates on their
interval, max as a point. Expected verdicts come from exact binomial sums computed here."""

import math

import numpy as np
import pytest

from gate.metrics.measurements import Samples
from gate.stats import mean_bounds, two_sided
from gate.units import Threshold, UnitKind, parse_threshold
from gate.verdicts.assess import assess

GOOD, BAD = 0.1, 1.0  # seconds; every limit below lies at 0.5 s


def limit(op: str, value: float) -> Threshold:
    return Threshold(op=op, value=value, kind=UnitKind.DURATION, text=f"{op} {value}")


def samples(n_good: int, n_bad: int, *, seed: int = 0) -> Samples:
    values = np.array([GOOD] * n_good + [BAD] * n_bad)
    np.random.default_rng(seed).shuffle(values)
    return Samples(values=values)


def at_most(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p), summed exactly."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def at_least(k: int, n: int, p: float) -> float:
    return 1.0 - at_most(k - 1, n, p)


# --- percentile gates with an upper limit ("p75 < X") -------------------------------------------


def test_p75_upper_limit_needs_11_clean_samples_to_pass():
    # 0 of n over: the 95 % upper bound of the exceedance share is 1 - 0.05**(1/n), under the
    # allowed 25 % only from n = 11 (0.75**10 = 0.056 > 5 %, 0.75**11 = 0.042 < 5 %).
    assert at_most(0, 10, 0.25) > 0.05 > at_most(0, 11, 0.25)
    upper = limit("<", 0.5)
    assert assess(samples(10, 0), "p75", upper, 0.95).outcome == "inconclusive"
    assert assess(samples(11, 0), "p75", upper, 0.95).outcome == "pass"


def test_p75_of_10_samples_is_inconclusive_with_5_over_and_fails_with_6_over():
    # Surely over 25 % once P(B >= k | n=10, p=0.25) < 5 %: k = 6 (2.0 %), not 5 (7.8 %).
    assert at_least(6, 10, 0.25) < 0.05 < at_least(5, 10, 0.25)
    upper = limit("<", 0.5)
    assert assess(samples(5, 5), "p75", upper, 0.95).outcome == "inconclusive"
    assert assess(samples(4, 6), "p75", upper, 0.95).outcome == "fail"


def test_p99_with_one_slow_request_in_1000_passes_and_with_20_fails():
    # P(B <= 1 | 1000, 1 %) = 0.049 % < 5 %: pass. P(B >= 20 | 1000, 1 %) = 0.3 % < 5 %: fail.
    assert at_most(1, 1000, 0.01) < 0.05
    assert at_least(20, 1000, 0.01) < 0.05
    upper = limit("<", 0.5)
    assert assess(samples(999, 1), "p99", upper, 0.95).outcome == "pass"
    assert assess(samples(980, 20), "p99", upper, 0.95).outcome == "fail"


def test_percentile_verdict_uses_the_requested_confidence():
    # 29 clean samples pass a p90 at 95 % (0.9**29 = 0.047) but not at 99 %.
    upper = limit("<", 0.5)
    assert assess(samples(29, 0), "p90", upper, 0.95).outcome == "pass"
    assert assess(samples(29, 0), "p90", upper, 0.99).outcome == "inconclusive"


# --- percentile gates with a lower limit ("p75 >= X": at most 75 % may lie below X) -----------


def test_p75_lower_limit_passes_from_3_samples_above_it():
    # For "p75 >= X" the bad samples are those below X, and up to 75 % may be: with none below,
    # the upper share bound 1 - 0.05**(1/n) is 0.78 at n = 2 and 0.63 at n = 3.
    assert at_most(0, 2, 0.75) > 0.05 > at_most(0, 3, 0.75)
    lower = limit(">=", 0.05)
    assert assess(samples(2, 0), "p75", lower, 0.95).outcome == "inconclusive"
    assert assess(samples(3, 0), "p75", lower, 0.95).outcome == "pass"


def test_p75_lower_limit_fails_with_11_of_11_below_and_not_with_10_of_10():
    # All below: the lower share bound 0.05**(1/n) exceeds 75 % from n = 11 (0.75**10 = 0.056).
    assert at_least(10, 10, 0.75) > 0.05 > at_least(11, 11, 0.75)
    lower = limit(">=", 0.5)  # GOOD samples (0.1 s) are now the ones below the limit
    assert assess(samples(10, 0), "p75", lower, 0.95).outcome == "inconclusive"
    assert assess(samples(11, 0), "p75", lower, 0.95).outcome == "fail"


def test_p90_lower_limit_allows_up_to_90_percent_below():
    lower = limit(">", 0.5)
    # None of 28 below: upper share bound 1 - 0.05**(1/28) = 0.10 < 0.9: pass.
    assert assess(Samples(values=np.full(28, 1.0)), "p90", lower, 0.95).outcome == "pass"
    # All 28 below: lower share bound 0.05**(1/28) = 0.8986 < 0.9: not surely more than 90 %.
    assert 0.05 ** (1 / 28) < 0.9 < 0.05 ** (1 / 29)
    assert assess(Samples(values=np.full(28, 0.1)), "p90", lower, 0.95).outcome == "inconclusive"
    assert assess(Samples(values=np.full(29, 0.1)), "p90", lower, 0.95).outcome == "fail"


def test_p50_lower_limit_with_a_few_below_passes():
    # 2 of 20 below "p50 >= X": P(B <= 2 | 20, 0.5) = 0.02 % < 5 %: pass.
    assert at_most(2, 20, 0.5) < 0.05
    values = Samples(values=np.array([0.1] * 2 + [1.0] * 18))
    assert assess(values, "p50", limit(">=", 0.5), 0.95).outcome == "pass"


@pytest.mark.parametrize(
    ("op", "statistic", "outcome"),
    [("<", "p90", "fail"), ("<=", "p90", "pass"), (">", "p50", "fail"), (">=", "p50", "pass")],
)
def test_a_sample_equal_to_the_limit_is_bad_for_strict_and_good_for_inclusive_limits(
    op, statistic, outcome
):
    # 29 samples all exactly at the limit: all bad (lower share bound 0.902 > the allowed 10 % or
    # 50 %) or all good (upper share bound 0.098 below it).
    values = np.full(29, 0.5)
    assert assess(Samples(values=values), statistic, limit(op, 0.5), 0.95).outcome == outcome


def test_percentile_value_is_numpys_linear_quantile_and_interval_is_two_sided():
    # 1..30 shuffled. The median is 15.5. Two-sided 95 % = one-sided 97.5 % each: the lower rank
    # is the largest l with P(B <= l-1 | 30, .5) <= 2.5 %, the upper rank the smallest u with
    # P(B >= u) <= 2.5 %: ranks 10 and 21 (one-sided 95 % would give 11 and 20).
    assert at_most(9, 30, 0.5) <= 0.025 < at_most(10, 30, 0.5)
    assert at_least(21, 30, 0.5) <= 0.025 < at_least(20, 30, 0.5)
    assert at_most(10, 30, 0.5) <= 0.05 and at_least(20, 30, 0.5) <= 0.05  # one-sided: 11, 20
    values = np.arange(1.0, 31.0)
    np.random.default_rng(7).shuffle(values)
    result = assess(Samples(values=values), "p50", limit("<", 100.0), 0.95)
    assert result.value == 15.5
    assert result.n == 30
    assert result.interval == (10.0, 21.0)
    assert result.estimate is False


def test_percentile_reason_counts_the_wrong_side_and_shows_the_share_bounds():
    upper = assess(samples(29, 0), "p90", limit("<", 0.5), 0.95)
    assert upper.reason == (
        f"0 of 29 samples on the wrong side; share bounds [0, {1 - 0.05 ** (1 / 29):.4g}] vs 0.1"
    )
    lower = assess(Samples(values=np.full(29, 0.1)), "p75", limit(">=", 0.5), 0.95)
    assert lower.reason == (
        f"29 of 29 samples on the wrong side; share bounds [{0.05 ** (1 / 29):.4g}, 1] vs 0.75"
    )
    p75 = assess(samples(11, 0), "p75", limit("<", 0.5), 0.95)
    assert p75.reason.endswith(" vs 0.25")
    p50 = assess(samples(11, 0), "p50", limit(">", 0.05), 0.95)
    assert p50.reason.endswith(" vs 0.5")


def test_percentile_equality_gate_is_judged_on_the_point_value():
    values = Samples(values=np.array([3.0, 1.0, 2.0]))
    equal = assess(values, "p50", limit("==", 2.0), 0.95)
    assert (equal.outcome, equal.value, equal.n, equal.interval) == ("pass", 2.0, 3, None)
    assert assess(values, "p50", limit("==", 2.5), 0.95).outcome == "fail"


# --- max ------------------------------------------------------------------------------------------


def test_max_of_samples_is_judged_as_a_point():
    values = Samples(values=np.array([0.2, 0.9, 0.4]))
    below = assess(values, "max", limit("<", 1.0), 0.95)
    assert (below.outcome, below.value, below.n, below.interval) == ("pass", 0.9, 3, None)
    assert assess(values, "max", limit("<", 0.9), 0.95).outcome == "fail"
    assert assess(values, "max", limit("<=", 0.9), 0.95).outcome == "pass"
    assert assess(values, "max", limit(">=", 1.0), 0.95).outcome == "fail"
    assert assess(values, "max", limit(">", 0.5), 0.95).outcome == "pass"


def test_max_keeps_the_estimate_flag_of_the_samples():
    values = np.array([0.2, 0.9])
    assert assess(Samples(values=values, estimate=True), "max", limit("<", 1.0), 0.95).estimate
    assert not assess(Samples(values=values), "max", limit("<", 1.0), 0.95).estimate


@pytest.mark.parametrize("statistic", ["p50", "p99", "max", "mean"])
def test_an_empty_scope_is_no_data(statistic):
    result = assess(Samples(values=np.array([])), statistic, limit("<", 1.0), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "empty scope: no samples"
    assert result.value is None


# --- mean -----------------------------------------------------------------------------------------

ALTERNATING = Samples(values=np.array([9.0, 11.0] * 100))  # mean exactly 10, sd ~1


@pytest.mark.parametrize(
    ("op", "value", "outcome"),
    [
        ("<", 12.0, "pass"),
        ("<", 8.0, "fail"),
        ("<", 10.0, "inconclusive"),
        ("<=", 12.0, "pass"),
        (">=", 8.0, "pass"),
        (">=", 12.0, "fail"),
        (">", 8.0, "pass"),
        (">", 12.0, "fail"),
        (">", 10.0, "inconclusive"),
        ("==", 10.0, "pass"),  # equality: the mean itself is compared
        ("==", 10.5, "fail"),
    ],
)
def test_mean_gate_is_judged_on_the_interval_of_the_mean(op, value, outcome):
    result = assess(ALTERNATING, "mean", limit(op, value), 0.95)
    assert result.outcome == outcome
    assert result.value == 10.0
    assert result.n == 200


def test_mean_verdict_uses_one_sided_bounds_and_shows_the_two_sided_interval():
    values = ALTERNATING.values
    one = mean_bounds(values, confidence=0.95)
    both = mean_bounds(values, confidence=two_sided(0.95))
    assert both.lower < one.lower < one.upper < both.upper
    between_upper = (one.upper + both.upper) / 2  # one-sided bound under it, two-sided not
    between_lower = (one.lower + both.lower) / 2
    assert assess(ALTERNATING, "mean", limit("<", between_upper), 0.95).outcome == "pass"
    assert assess(ALTERNATING, "mean", limit(">", between_lower), 0.95).outcome == "pass"
    assert assess(ALTERNATING, "mean", limit("<", between_lower), 0.95).outcome == "fail"
    assert assess(ALTERNATING, "mean", limit(">", between_upper), 0.95).outcome == "fail"
    result = assess(ALTERNATING, "mean", limit("<", 12.0), 0.95)
    assert result.interval == (both.lower, both.upper)


def test_mean_of_a_parsed_duration_threshold():
    fast = Samples(values=np.array([0.2, 0.3] * 50))
    under_800ms = parse_threshold("< 800ms", kind=UnitKind.DURATION)
    at_least_1s = parse_threshold(">= 1s", kind=UnitKind.DURATION)
    assert assess(fast, "mean", under_800ms, 0.95).outcome == "pass"
    assert assess(fast, "mean", at_least_1s, 0.95).outcome == "fail"


def test_an_equality_on_a_mean_is_judged_on_the_mean_not_left_inconclusive_forever():
    off = assess(Samples(values=np.full(300, 4.0)), "mean", limit("==", 100.0), 0.95)
    assert off.outcome == "fail" and off.value == 4.0
    exact = assess(Samples(values=np.full(3, 100.0)), "mean", limit("==", 100.0), 0.95)
    assert exact.outcome == "pass"
