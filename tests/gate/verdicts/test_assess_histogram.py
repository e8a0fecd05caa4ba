"""`assess` on Prometheus-style cumulative histograms: percentiles are only judged when the
threshold is a bucket bound (exceedance counts read off that bucket), everything else is an
estimate or no data; `_histogram_quantile` interpolates within a bucket."""

import math

import numpy as np
import pytest

from gate.metrics.measurements import Histogram
from gate.units import Threshold, UnitKind, parse_threshold
from gate.verdicts.assess import _histogram_quantile, assess, point_value

INF = math.inf


def limit(op: str, value: float) -> Threshold:
    return Threshold(op=op, value=value, kind=UnitKind.DURATION, text=f"{op} {value}")


def histogram(bounds, cumulative, total_sum=0.0) -> Histogram:
    return Histogram(
        bounds=np.array(bounds, dtype=float),
        cumulative=np.array(cumulative, dtype=float),
        total_sum=total_sum,
    )


# 1000 steps: 900 at or under 100 ms, 99 more at or under 200 ms, one in (200 ms, 500 ms].
STEPS = histogram([0.1, 0.2, 0.5, INF], [900, 999, 1000, 1000], total_sum=120.0)


# --- _histogram_quantile ----------------------------------------------------------------------


def test_quantile_interpolates_linearly_inside_its_bucket():
    # rank 0.99 * 1000 = 990 lies in (0.1, 0.2], 90 of that bucket's 99 observations in.
    assert _histogram_quantile(STEPS, 0.99) == pytest.approx(0.1 + 0.1 * 90 / 99, rel=1e-12)


def test_quantile_in_the_first_bucket_interpolates_from_zero():
    # rank 500 of the 900 in (0, 0.1].
    assert _histogram_quantile(STEPS, 0.5) == pytest.approx(0.1 * 500 / 900, rel=1e-12)


def test_quantile_at_a_bucket_edge_is_that_bucket_bound_even_before_empty_buckets():
    # 10 at or under 0.1, none in (0.1, 0.2], 10 in (0.2, 0.5]: the median (rank 10) is 0.1,
    # not the 0.2 past the empty bucket.
    hist = histogram([0.1, 0.2, 0.5, INF], [10, 10, 20, 20])
    assert _histogram_quantile(hist, 0.5) == 0.1
    assert _histogram_quantile(hist, 0.75) == pytest.approx(0.2 + 0.3 * 5 / 10, rel=1e-12)


def test_quantile_beyond_the_last_finite_bucket_is_that_bucket_bound():
    hist = histogram([0.1, 0.2, 0.5, INF], [5, 6, 8, 10])  # rank 9 of 10 lies in (0.5, +inf)
    assert _histogram_quantile(hist, 0.9) == 0.5


def test_quantile_of_a_histogram_with_only_the_inf_bucket_is_unknown():
    assert _histogram_quantile(histogram([INF], [7]), 0.5) is None


def test_quantile_of_an_empty_histogram_is_unknown():
    assert _histogram_quantile(histogram([0.1, INF], [0, 0]), 0.5) is None
    assert _histogram_quantile(histogram([], []), 0.5) is None


def test_quantile_of_zero_at_an_empty_first_bucket_is_its_bound():
    # rank 0 with nothing in the first bucket: the zero-width bucket gives its upper bound.
    assert _histogram_quantile(histogram([0.1, 0.2, INF], [0, 4, 4]), 0.0) == 0.1


def test_point_value_of_a_histogram():
    assert point_value(STEPS, "p99") == _histogram_quantile(STEPS, 0.99)
    assert point_value(STEPS, "mean") == 120.0 / 1000
    assert point_value(histogram([0.1, INF], [0, 0], total_sum=0.0), "mean") is None
    assert point_value(histogram([0.1, INF], [0, 0]), "p50") is None


# --- percentile gates at a bucket bound ---------------------------------------------------------


def test_p99_under_a_bucket_bound_with_one_in_1000_beyond_passes():
    # 1 beyond 200 ms: the 95 % upper share bound (0.47 %) is under the allowed 1 %.
    result = assess(STEPS, "p99", limit("<", 0.2), 0.95)
    assert result.outcome == "pass"
    assert result.n == 1000
    assert result.estimate is True
    assert result.value == pytest.approx(0.1 + 0.1 * 90 / 99, rel=1e-12)
    assert result.reason == "histogram estimate: 1 of 1000 beyond the bucket bound"


def test_p99_under_a_bucket_bound_with_100_in_1000_beyond_fails():
    result = assess(STEPS, "p99", limit("<", 0.1), 0.95)
    assert result.outcome == "fail"
    assert result.reason == "histogram estimate: 100 of 1000 beyond the bucket bound"


def test_histogram_interval_is_the_two_sided_exceedance_share_interval():
    # None of 1000 beyond 500 ms: two-sided 95% share bounds [0, 1 - 0.025**(1/1000)].
    result = assess(STEPS, "p99", limit("<=", 0.5), 0.95)
    assert result.outcome == "pass"
    low, high = result.interval
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 1000), rel=1e-9)
    # A lower limit at 500 ms has all 1000 at or below it on the bad side: [0.025**(1/1000), 1].
    everything = assess(STEPS, "p50", limit(">", 0.5), 0.95)
    assert everything.interval[0] == pytest.approx(0.025 ** (1 / 1000), rel=1e-9)
    assert everything.interval[1] == 1.0


def test_p99_needs_299_observations_under_the_bound_to_pass():
    few = histogram([0.1, INF], [298, 298])
    enough = histogram([0.1, INF], [299, 299])
    assert assess(few, "p99", limit("<", 0.1), 0.95).outcome == "inconclusive"
    assert assess(enough, "p99", limit("<", 0.1), 0.95).outcome == "pass"


# 1000 token gaps: none under 10 ms, 5 in (10 ms, 100 ms], 495 in (100 ms, 1 s], 500 above.
GAPS = histogram([0.01, 0.1, 1.0, INF], [0, 5, 500, 1000])


def test_lower_limit_percentile_counts_the_observations_at_or_below_the_bound():
    # "p75 >= X": at most 75 % may be below X.
    assert assess(GAPS, "p75", limit(">=", 0.01), 0.95).outcome == "pass"  # 0 below
    five = assess(GAPS, "p75", limit(">=", 0.1), 0.95)  # 5 below
    assert five.outcome == "pass"
    assert five.reason == "histogram estimate: 5 of 1000 beyond the bucket bound"
    assert assess(GAPS, "p50", limit(">=", 1.0), 0.95).outcome == "inconclusive"  # 500 below
    assert assess(GAPS, "p99", limit(">=", 1.0), 0.95).outcome == "pass"  # 50 % < 99 %
    assert assess(GAPS, "p75", limit(">=", 1.0), 0.95).outcome == "pass"  # 50 % < 75 %


def test_lower_limit_percentile_fails_when_too_many_lie_at_or_below_the_bound():
    few_fast = histogram([0.01, 0.1, INF], [0, 990, 1000])  # 990 of 1000 at or under 100 ms
    assert assess(few_fast, "p90", limit(">", 0.1), 0.95).outcome == "fail"
    assert assess(few_fast, "p50", limit(">", 0.01), 0.95).outcome == "pass"


def test_upper_limit_percentile_on_a_lower_quantile_allows_its_share():
    # "p50 < 1 s" with 500 of 1000 above: 50 % is not surely under 50 %.
    assert assess(GAPS, "p50", limit("<", 1.0), 0.95).outcome == "inconclusive"
    # "p75 < 100 ms" with 995 of 1000 above: surely over 25 %.
    assert assess(GAPS, "p75", limit("<", 0.1), 0.95).outcome == "fail"
    # "p50 < 100 ms" on STEPS: 100 of 1000 above, surely under 50 %.
    assert assess(STEPS, "p50", limit("<", 0.1), 0.95).outcome == "pass"


def test_a_threshold_in_ms_matches_its_bucket_bound_despite_float_rounding():
    threshold = parse_threshold("< 700ms", kind=UnitKind.DURATION)
    assert threshold.value != 0.7  # 700 * 1e-3 rounds to 0.7000000000000001
    hist = histogram([0.3, 0.7, INF], [500, 1000, 1000])
    assert assess(hist, "p99", threshold, 0.95).outcome == "pass"


@pytest.mark.parametrize("threshold_value", [0.15, 0.2 * (1 + 1e-6), 0.3])
def test_a_threshold_between_bucket_bounds_is_inconclusive(threshold_value):
    result = assess(STEPS, "p99", limit("<", threshold_value), 0.95)
    assert result.outcome == "inconclusive"
    assert result.value == pytest.approx(0.1 + 0.1 * 90 / 99, rel=1e-12)
    assert result.n == 1000
    assert result.estimate is True
    assert result.interval is None
    assert result.reason == "threshold is not a bucket bound: the histogram cannot resolve it"


def test_a_threshold_nanoseconds_from_a_bucket_bound_is_not_that_bound():
    # Only float rounding (relative 1e-9, absolute 1e-12) counts as "at the bound": a 1 ns limit
    # is not the 5 ns bucket bound.
    hist = histogram([5e-9, 1e-6, INF], [1000, 1000, 1000])
    assert assess(hist, "p99", limit("<", 1e-9), 0.95).outcome == "inconclusive"
    assert assess(hist, "p99", limit("<", 5e-9), 0.95).outcome == "pass"


def test_an_equality_gate_on_a_histogram_percentile_is_inconclusive_even_at_a_bound():
    result = assess(STEPS, "p99", limit("==", 0.2), 0.95)
    assert result.outcome == "inconclusive"
    assert result.reason == "threshold is not a bucket bound: the histogram cannot resolve it"


# --- mean, max, empty -----------------------------------------------------------------------------


def test_histogram_mean_is_sum_over_count_judged_as_a_point_estimate():
    result = assess(STEPS, "mean", limit("<", 0.2), 0.95)
    assert result.outcome == "pass"
    assert result.value == 0.12
    assert result.n == 1000
    assert result.estimate is True
    assert result.reason == "histogram estimate"
    assert assess(STEPS, "mean", limit("<", 0.1), 0.95).outcome == "fail"
    assert assess(STEPS, "mean", limit(">=", 0.12), 0.95).outcome == "pass"


def test_histogram_max_is_no_data():
    result = assess(STEPS, "max", limit("<", 1.0), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "a max needs exact step records, not a histogram"


@pytest.mark.parametrize("statistic", ["p99", "mean", "max"])
def test_an_empty_histogram_is_no_data(statistic):
    result = assess(histogram([0.1, INF], [0, 0]), statistic, limit("<", 0.1), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "the histogram saw no observations in the window"
