"""gate.verdicts.assess at its edges: a sample set's note joined to the verdict's reason, the
interval shown with a mean compared by equality, counts that a watched run never holds back,
the bucket a watched histogram judges, an equality on a percentile while watched, and where the
normal quantile lands among floats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.metrics.measurements import Events, Histogram, Samples
from gate.stats import mean_bounds, two_sided
from gate.units import Threshold, UnitKind
from gate.verdicts import assess as assess_mod
from gate.verdicts.assess import assess


def _limit(op: str, value: float, kind: UnitKind = UnitKind.DURATION) -> Threshold:
    return Threshold(op=op, value=value, kind=kind, text=f"{op} {value}")


_NOTE = "12 censored samples counted as 30 s"


def test_a_note_follows_the_reason_of_a_sample_verdict() -> None:
    values = np.arange(1.0, 101.0)
    a = assess(Samples(values=values, note=_NOTE), "p50", _limit("<=", 80.0), 0.95)
    plain = assess(Samples(values=values), "p50", _limit("<=", 80.0), 0.95)
    assert plain.reason.startswith("20 of 100 samples on the wrong side; share bounds [")
    assert a.reason == f"{plain.reason}; {_NOTE}"
    assert (a.outcome, a.value, a.n, a.interval) == (
        plain.outcome,
        plain.value,
        plain.n,
        plain.interval,
    )


def test_a_note_alone_is_the_reason() -> None:
    a = assess(Samples(values=np.arange(1.0, 101.0), note=_NOTE), "max", _limit("<=", 80.0), 0.95)
    assert (a.outcome, a.value, a.reason) == ("fail", 100.0, _NOTE)


def test_no_note_no_separator() -> None:
    a = assess(Samples(values=np.arange(1.0, 101.0)), "max", _limit("<=", 80.0), 0.95)
    assert a.reason == ""


def test_a_mean_compared_by_equality_shows_its_two_sided_interval() -> None:
    values = np.arange(1.0, 101.0)
    a = assess(Samples(values=values), "mean", _limit("==", 50.5), 0.95)
    shown = mean_bounds(values, confidence=two_sided(0.95))
    assert (a.outcome, a.value, a.n) == ("pass", 50.5, 100)
    assert a.interval == (shown.lower, shown.upper)


@pytest.mark.parametrize("statistic", ["count", "delta"])
def test_a_count_that_fails_is_not_held_back_while_watched(statistic: str) -> None:
    # A count is a fact of the data seen: no anytime-valid share to wait for.
    events = Events(hits=10, total=20, window_seconds=5.0)
    a = assess(events, statistic, _limit("<=", 5, UnitKind.COUNT), 0.95, sequential=True)
    assert (a.outcome, a.value, a.reason) == ("fail", 10.0, "")


def test_a_watched_histogram_counts_beyond_the_bucket_bound_that_is_the_threshold() -> None:
    # A bucket bound 1e-5 below the threshold is a different bucket: 8 of 300 are beyond the
    # threshold's own bound (a one-look fail, held back while watched), not 290.
    hist = Histogram(
        bounds=np.array([0.99999, 1.0, np.inf]),
        cumulative=np.array([10, 292, 300]),
        total_sum=250.0,
    )
    once = assess(hist, "p99", _limit("<=", 1.0), 0.95)
    assert (once.outcome, once.reason) == (
        "fail",
        "histogram estimate: 8 of 300 beyond the bucket bound",
    )
    watched = assess(hist, "p99", _limit("<=", 1.0), 0.95, sequential=True)
    assert watched.outcome == "inconclusive"
    assert watched.reason.startswith("8 of 300 on the wrong side: past the limit for one look")


def test_a_watched_equality_on_a_percentile_is_judged_on_its_share() -> None:
    a = assess(
        Samples(values=np.arange(1.0, 101.0)), "p50", _limit("==", 3.0), 0.95, sequential=True
    )
    assert (a.outcome, a.value, a.n) == ("fail", 50.5, 100)


def _cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("p", [0.95, 0.975, 0.9875])
def test_the_normal_quantile_is_where_the_cdf_first_reaches_p(p: float) -> None:
    # Several floats around the quantile have a CDF of exactly p; the search keeps the bad side
    # strictly below p, so it ends at the first of them (or the float just before it).
    z = assess_mod._normal_quantile(p)
    assert _cdf(math.nextafter(z, -math.inf)) < p
    assert _cdf(math.nextafter(z, math.inf)) >= p
