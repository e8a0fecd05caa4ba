"""`assess` on events (counts, rates, shares of requests), sampler series (peak / mean / final,
optionally as a share of the device total), scalars (possibly only a lower bound) and NoData."""

import math

import numpy as np
import pytest

from gate.metrics.measurements import Events, NoData, Scalar, Series
from gate.units import Threshold, UnitKind, parse_threshold
from gate.verdicts.assess import assess, point_value

GIB = 1024**3


def limit(op: str, value: float, kind: UnitKind = UnitKind.COUNT) -> Threshold:
    return Threshold(op=op, value=value, kind=kind, text=f"{op} {value}")


# --- NoData ---------------------------------------------------------------------------------------


def test_no_data_keeps_its_reason():
    result = assess(NoData(reason="no gpu.jsonl sampler records"), "peak", limit("<", 1), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "no gpu.jsonl sampler records"
    assert result.value is None and result.n == 0


# --- events: count, delta, rate -------------------------------------------------------------------

ERRORS = Events(hits=3, total=100, window_seconds=10.0)


@pytest.mark.parametrize("statistic", ["count", "delta"])
def test_event_count_is_judged_as_a_point_over_all_requests(statistic):
    result = assess(ERRORS, statistic, limit("<=", 3), 0.95)
    assert (result.outcome, result.value, result.n, result.interval) == ("pass", 3.0, 100, None)
    assert assess(ERRORS, statistic, limit("<", 3), 0.95).outcome == "fail"
    assert assess(ERRORS, statistic, limit(">", 2), 0.95).outcome == "pass"


def test_event_rate_is_hits_per_second_of_the_window():
    result = assess(ERRORS, "rate", limit("<", 0.5, UnitKind.RATE), 0.95)
    assert (result.outcome, result.value, result.n) == ("pass", 0.3, 100)
    assert assess(ERRORS, "rate", limit("<", 0.3, UnitKind.RATE), 0.95).outcome == "fail"


def test_event_rate_over_a_sub_second_window():
    events = Events(hits=3, total=3, window_seconds=0.5)
    result = assess(events, "rate", limit("<=", 6.0, UnitKind.RATE), 0.95)
    assert (result.outcome, result.value) == ("pass", 6.0)
    assert point_value(events, "rate") == 6.0


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_a_rate_over_a_window_without_time_is_no_data(window):
    events = Events(hits=3, total=100, window_seconds=window)
    result = assess(events, "rate", limit("<", 0.5, UnitKind.RATE), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "the scope covers no time"


def test_a_count_over_a_window_without_time_is_still_judged():
    events = Events(hits=3, total=100, window_seconds=0.0)
    assert assess(events, "count", limit("<", 5), 0.95).outcome == "pass"


def test_a_count_over_no_requests_is_still_judged():
    result = assess(Events(hits=0, total=0, window_seconds=5.0), "count", limit("<", 1), 0.95)
    assert (result.outcome, result.value, result.n) == ("pass", 0.0, 0)


# --- events: share of requests ("mean") -----------------------------------------------------------


def test_share_with_no_requests_is_no_data():
    result = assess(Events(hits=0, total=0, window_seconds=5.0), "mean", limit("<", 0.05), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "empty scope: no requests"


def share(hits: int, total: int, threshold: Threshold, confidence: float = 0.95) -> str:
    """The outcome of a share-of-requests gate ("mean" of events) on `hits` of `total`."""
    events = Events(hits=hits, total=total, window_seconds=1.0)
    return assess(events, "mean", threshold, confidence).outcome


def test_error_share_upper_limit_passes_fails_or_is_inconclusive_on_its_interval():
    under_5 = limit("<", 0.05, UnitKind.RATIO)
    # 0 errors of 59: upper bound 1 - 0.05**(1/59) = 4.95 % < 5 %; of 58: 5.03 %.
    assert 1 - 0.05 ** (1 / 59) < 0.05 < 1 - 0.05 ** (1 / 58)
    assert share(0, 59, under_5) == "pass"
    assert share(0, 58, under_5) == "inconclusive"
    # 59 errors of 59: lower bound 0.05**(1/59) = 95 % > 5 %.
    assert share(59, 59, under_5) == "fail"


def test_success_share_lower_limit_passes_or_fails_on_its_interval():
    at_least_95 = limit(">=", 0.95, UnitKind.RATIO)
    # 59 of 59 succeed: lower bound 0.05**(1/59) = 95.05 % >= 95 %: pass; 58 of 58: 94.97 %.
    assert 0.05 ** (1 / 58) < 0.95 < 0.05 ** (1 / 59)
    assert share(59, 59, at_least_95) == "pass"
    assert share(58, 58, at_least_95) == "inconclusive"
    # 0 of 59 succeed: the upper bound 4.95 % is far below 95 %.
    assert share(0, 59, at_least_95) == "fail"
    assert share(59, 59, limit(">", 0.95, UnitKind.RATIO)) == "pass"


def test_share_verdict_is_one_sided_and_shown_interval_two_sided():
    # 0 of 100: one-sided upper 1 - 0.05**(1/100) = 2.95 %, two-sided 1 - 0.025**(1/100) = 3.62 %.
    events = Events(hits=0, total=100, window_seconds=1)
    one, both = 1 - 0.05 ** (1 / 100), 1 - 0.025 ** (1 / 100)
    result = assess(events, "mean", limit("<", 0.033, UnitKind.RATIO), 0.95)
    assert one < 0.033 < both
    assert result.outcome == "pass"
    assert result.value == 0.0
    assert result.n == 100
    assert result.interval[0] == 0.0
    assert result.interval[1] == pytest.approx(both, rel=1e-9)
    assert result.reason == "0 of 100 requests"


def test_share_value_is_hits_over_total():
    result = assess(Events(hits=1, total=4, window_seconds=1), "mean", limit("<", 0.9), 0.95)
    assert result.value == 0.25
    assert result.reason == "1 of 4 requests"


def test_share_equality_gate_is_judged_on_the_point_value():
    events = Events(hits=1, total=4, window_seconds=1)
    equal = assess(events, "mean", limit("==", 0.25, UnitKind.RATIO), 0.95)
    assert (equal.outcome, equal.value, equal.n, equal.interval) == ("pass", 0.25, 4, None)
    assert assess(events, "mean", limit("==", 0.5, UnitKind.RATIO), 0.95).outcome == "fail"


def test_share_verdict_uses_the_requested_confidence():
    under_5 = limit("<", 0.05, UnitKind.RATIO)
    assert share(0, 59, under_5, 0.95) == "pass"
    assert share(0, 59, under_5, 0.99) == "inconclusive"


def test_point_value_of_events():
    assert point_value(ERRORS, "count") == 3.0
    assert point_value(ERRORS, "delta") == 3.0
    assert point_value(ERRORS, "rate") == 0.3
    assert point_value(ERRORS, "mean") == 0.03
    assert point_value(Events(hits=3, total=100, window_seconds=0.0), "rate") is None
    assert point_value(Events(hits=0, total=0, window_seconds=1.0), "mean") is None


# --- series: peak, mean, final --------------------------------------------------------------------

MEMORY = Series(
    values=np.array([2.0, 6.0, 4.0]) * GIB,
    totals=np.array([8.0, 8.0, 8.0]) * GIB,
    note="nvml",
)


@pytest.mark.parametrize(
    ("statistic", "expected"), [("peak", 6.0 * GIB), ("mean", 4.0 * GIB), ("final", 4.0 * GIB)]
)
def test_series_statistic_is_judged_as_a_point(statistic, expected):
    result = assess(MEMORY, statistic, limit("<=", expected, UnitKind.BYTES), 0.95)
    assert (result.outcome, result.value, result.n) == ("pass", expected, 3)
    assert result.reason == "nvml"
    assert assess(MEMORY, statistic, limit("<", expected, UnitKind.BYTES), 0.95).outcome == "fail"


def test_series_without_note_has_an_empty_reason():
    result = assess(Series(values=np.array([1.0])), "peak", limit("<", 2.0), 0.95)
    assert result.reason == ""


def test_empty_series_is_no_data():
    result = assess(Series(values=np.array([])), "peak", limit("<", 1.0), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "no samples in this window"
    assert point_value(Series(values=np.array([])), "peak") is None


def test_series_as_a_percent_of_device_total():
    # Peak 6 GiB of 8 GiB = 75 %.
    under_80 = parse_threshold("< 80%", kind=UnitKind.BYTES)
    under_70 = parse_threshold("< 70%", kind=UnitKind.BYTES)
    assert under_80.of_total
    result = assess(MEMORY, "peak", under_80, 0.95)
    assert (result.outcome, result.value, result.n) == ("pass", 0.75, 3)
    assert result.reason == "nvml"
    assert assess(MEMORY, "peak", under_70, 0.95).outcome == "fail"
    assert assess(MEMORY, "mean", under_70, 0.95).value == 0.5


def test_percent_of_total_is_taken_sample_by_sample():
    # The device total changes (e.g. a MIG reconfiguration): 3 of 4 GiB is the peak ratio, not
    # 6 GiB of a later 16 GiB.
    series = Series(values=np.array([3.0, 6.0]) * GIB, totals=np.array([4.0, 16.0]) * GIB)
    under_80 = parse_threshold("< 80%", kind=UnitKind.BYTES)
    assert assess(series, "peak", under_80, 0.95).value == 0.75
    assert assess(series, "final", under_80, 0.95).value == 0.375


def test_percent_of_total_without_any_device_total_is_no_data():
    under_80 = parse_threshold("< 80%", kind=UnitKind.BYTES)
    no_totals = Series(values=np.array([1.0, 2.0]) * GIB)
    nan_totals = Series(values=np.array([1.0, 2.0]) * GIB, totals=np.array([math.nan, math.nan]))
    for series in (no_totals, nan_totals):
        result = assess(series, "peak", under_80, 0.95)
        assert result.outcome == "no_data"
        assert result.reason == "no device total to take a % of (CPU fallback?)"


def test_percent_of_total_with_some_device_totals_is_judged():
    # The first record had no total; the final one did: 2 of 8 GiB.
    series = Series(values=np.array([1.0, 2.0]) * GIB, totals=np.array([math.nan, 8.0 * GIB]))
    result = assess(series, "final", parse_threshold("< 80%", kind=UnitKind.BYTES), 0.95)
    assert (result.outcome, result.value) == ("pass", 0.25)


def test_an_absolute_threshold_ignores_the_device_total():
    under_7gib = parse_threshold("< 7GiB", kind=UnitKind.BYTES)
    result = assess(MEMORY, "peak", under_7gib, 0.95)
    assert (result.outcome, result.value) == ("pass", 6.0 * GIB)
    no_totals = Series(values=np.array([1.0]) * GIB)
    assert assess(no_totals, "peak", under_7gib, 0.95).outcome == "pass"


def test_point_value_of_a_series():
    assert point_value(MEMORY, "peak") == 6.0 * GIB
    assert point_value(MEMORY, "mean") == 4.0 * GIB
    assert point_value(MEMORY, "final") == 4.0 * GIB


# --- scalars --------------------------------------------------------------------------------------


def test_scalar_is_judged_as_a_point_with_its_n_and_note():
    scalar = Scalar(value=12.0, n=4, note="recovered after 12 s")
    result = assess(scalar, "final", limit("<", 30.0, UnitKind.DURATION), 0.95)
    assert (result.outcome, result.value, result.n) == ("pass", 12.0, 4)
    assert result.reason == "recovered after 12 s"
    assert assess(scalar, "final", limit("<", 10.0, UnitKind.DURATION), 0.95).outcome == "fail"
    assert assess(Scalar(value=1.0), "final", limit("<", 2.0), 0.95).reason == ""


def test_a_scalar_lower_bound_under_an_upper_limit_is_inconclusive():
    # "at least 12 s and still not recovered" under "< 30s": it may still end past 30 s.
    scalar = Scalar(value=12.0, n=2, note="not recovered yet", lower_bound=True)
    result = assess(scalar, "final", limit("<", 30.0, UnitKind.DURATION), 0.95)
    assert result.outcome == "inconclusive"
    assert (result.value, result.n) == (12.0, 2)
    assert result.reason == "at least 12: not recovered yet"


def test_a_scalar_lower_bound_already_past_an_upper_limit_fails():
    scalar = Scalar(value=45.0, note="not recovered yet", lower_bound=True)
    result = assess(scalar, "final", limit("<", 30.0, UnitKind.DURATION), 0.95)
    assert result.outcome == "fail"
    assert result.reason == "not recovered yet"


def test_a_scalar_lower_bound_over_a_lower_limit_passes():
    scalar = Scalar(value=45.0, note="still climbing", lower_bound=True)
    assert assess(scalar, "final", limit(">=", 30.0), 0.95).outcome == "pass"
    assert assess(scalar, "final", limit(">=", 60.0), 0.95).outcome == "fail"


def test_a_nan_scalar_is_no_data():
    result = assess(Scalar(value=math.nan, n=3), "final", limit("<", 1.0), 0.95)
    assert result.outcome == "no_data"
    assert result.reason == "no value in this scope"
    assert result.n == 3
    assert result.value is None


def test_point_value_of_scalar_and_no_data():
    assert point_value(Scalar(value=2.5), "final") == 2.5
    assert point_value(NoData(reason="x"), "p99") is None


def test_peak_percent_of_total_ignores_records_without_a_device_total():
    series = Series(values=np.array([1.0, 6.0]) * 2**30, totals=np.array([math.nan, 8.0 * 2**30]))
    result = assess(series, "peak", parse_threshold("< 80%", kind=UnitKind.BYTES), 0.95)
    assert (result.outcome, result.value) == ("pass", 0.75)
