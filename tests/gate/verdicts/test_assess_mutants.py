"""Exact values of gate.verdicts.assess's helpers: the normal quantile, the monitor interval of
a mean and of a rate (its formula, its clip at 0, where it does not apply), the share behind an
anytime-valid abort (samples, a histogram whose bucket bound is the threshold, events) and the
reasons a watched run's FAIL is held back."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from gate.metrics.measurements import Events, Histogram, Samples
from gate.stats import mean_bounds, proportion_bounds, two_sided
from gate.units import Threshold, UnitKind
from gate.verdicts import assess as assess_mod
from gate.verdicts.assess import assess, monitor_interval


def _limit(op: str, value: float, kind: UnitKind = UnitKind.DURATION) -> Threshold:
    return Threshold(op=op, value=value, kind=kind, text=f"{op} {value}")


@pytest.mark.parametrize("p", [1e-6, 0.001, 0.05, 0.3, 0.5, 0.8, 0.95, 0.975, 0.9875, 0.999999])
def test_the_normal_quantile_is_the_inverse_normal_cdf(p: float) -> None:
    assert assess_mod._normal_quantile(p) == pytest.approx(NormalDist().inv_cdf(p), abs=1e-10)


def test_the_monitor_interval_of_a_mean_is_the_two_sided_mean_bound() -> None:
    values = np.random.default_rng(3).lognormal(0, 1, 40)
    b = mean_bounds(values, confidence=two_sided(0.9))
    assert monitor_interval(Samples(values=values), "mean", 0.9) == (b.lower, b.upper)


def test_the_monitor_interval_of_a_share_is_clopper_pearson() -> None:
    b = proportion_bounds(7, 40, confidence=two_sided(0.9))
    got = monitor_interval(Events(hits=7, total=40, window_seconds=3.0), "mean", 0.9)
    assert got == (b.lower, b.upper)


def _rate_interval(hits: int, total: int, seconds: float, confidence: float):
    # A two-sided interval at `confidence`: z = 1.645 at 0.9, 1.96 at 0.95 (each side (1-c)/2).
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    spread = z * math.sqrt(hits * max(1.0, hits / total))
    rate = hits / seconds
    return max(0.0, rate - spread / seconds), rate + spread / seconds


@pytest.mark.parametrize(
    ("hits", "total", "seconds"),
    [
        (500, 100, 5.0),  # five tokens a request: the count of requests sets the spread
        (3, 100, 2.0),  # fewer events than requests: Poisson in the events
        (100, 100, 100.0),  # a rate of 1/s whose lower bound lies in (0, 1)
        (2, 2, 1.0),  # a lower bound below 0 is clipped to 0
    ],
)
def test_the_monitor_interval_of_a_rate(hits: int, total: int, seconds: float) -> None:
    got = monitor_interval(Events(hits=hits, total=total, window_seconds=seconds), "rate", 0.9)
    assert got is not None
    expected = _rate_interval(hits, total, seconds, 0.9)
    assert got[0] == pytest.approx(expected[0], rel=1e-9, abs=1e-12)
    assert got[1] == pytest.approx(expected[1], rel=1e-9)


def test_no_monitor_interval_where_none_applies() -> None:
    events = Events(hits=5, total=10, window_seconds=4.0)
    assert monitor_interval(events, "p99", 0.9) is None
    assert monitor_interval(events, "count", 0.9) is None
    assert monitor_interval(Events(hits=5, total=10, window_seconds=0.0), "rate", 0.9) is None
    assert monitor_interval(Events(hits=0, total=0, window_seconds=4.0), "rate", 0.9) is None
    assert monitor_interval(Samples(values=np.array([1.0, 2.0, 3.0])), "rate", 0.9) is None


def test_the_bad_share_of_samples_and_of_events() -> None:
    values = Samples(values=np.array([0.5, 0.7, 1.5, 2.0, 0.1]))
    assert assess_mod._bad_share(values, "p90", _limit("<", 1.0)) == (2, 5, pytest.approx(0.1))
    assert assess_mod._bad_share(values, "p90", _limit(">", 1.0)) == (3, 5, pytest.approx(0.9))
    events = Events(hits=3, total=20, window_seconds=1.0)
    ratio = UnitKind.RATIO
    assert assess_mod._bad_share(events, "mean", _limit("<", 0.1, ratio)) == (3, 20, 0.1)
    assert assess_mod._bad_share(events, "mean", _limit(">", 0.1, ratio)) == (
        17, 20, pytest.approx(0.9)
    )  # fmt: skip
    assert assess_mod._bad_share(events, "rate", _limit("<", 0.1, ratio)) is None
    assert assess_mod._bad_share(values, "max", _limit("<", 1.0)) is None


def test_the_bad_share_of_a_histogram_needs_a_bucket_bound_at_the_threshold() -> None:
    hist = Histogram(
        bounds=np.array([0.1, 0.2, 0.5, math.inf]),
        cumulative=np.array([900.0, 999.0, 1000.0, 1000.0]),
        total_sum=120.0,
    )
    assert assess_mod._bad_share(hist, "p99", _limit("<", 0.2)) == (1, 1000, pytest.approx(0.01))
    # A bound equal up to rounding (0.2 written as 0.1 + 0.1) still matches.
    assert assess_mod._bad_share(hist, "p99", _limit("<", 0.1 + 0.1 + 1e-12))[0] == 1
    assert assess_mod._bad_share(hist, "p99", _limit(">", 0.1)) == (
        900, 1000, pytest.approx(0.99)
    )  # fmt: skip
    assert assess_mod._bad_share(hist, "p99", _limit("<", 0.3)) is None  # no such bound
    assert assess_mod._bad_share(hist, "p99", _limit("<", 0.2002)) is None
    assert assess_mod._bad_share(hist, "mean", _limit("<", 0.2)) is None
    assert assess_mod._bad_share(hist, "max", _limit("<", 0.2)) is None


def test_a_watched_mean_is_held_back_with_its_reason() -> None:
    values = Samples(values=np.full(400, 5.0))
    one_shot = assess(values, "mean", _limit("<", 1.0), 0.95)
    watched = assess(values, "mean", _limit("<", 1.0), 0.95, sequential=True)
    assert one_shot.outcome == "fail"
    assert watched.outcome == "inconclusive"
    assert watched.reason == "a mean is not judged while the run is in progress"


def test_a_watched_share_not_yet_past_the_anytime_bound_says_so() -> None:
    # 7 of 300 over 1 s where 1 % is allowed: a FAIL for one look, not for the anytime bound.
    values = Samples(values=np.array([2.0] * 7 + [0.5] * 293))
    one_shot = assess(values, "p99", _limit("<", 1.0), 0.95)
    watched = assess(values, "p99", _limit("<", 1.0), 0.95, sequential=True)
    assert one_shot.outcome == "fail"
    assert watched.outcome == "inconclusive"
    assert watched.reason == (
        "7 of 300 on the wrong side: past the limit for one look, not yet for an "
        "anytime-valid bound (the run is still being watched)"
    )


def test_the_rate_interval_at_95_percent_uses_z_1_96() -> None:
    # 100 events in 100 s: rate 1/s, Poisson sd 10 events, so 1 +- 1.96 * 10 / 100.
    low, high = monitor_interval(Events(hits=100, total=100, window_seconds=100.0), "rate", 0.95)
    assert low == pytest.approx(1 - 0.196, abs=1e-3) and high == pytest.approx(1 + 0.196, abs=1e-3)
