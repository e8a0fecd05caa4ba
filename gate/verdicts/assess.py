"""Judging one measurement's statistic against one threshold level: the rules per statistic kind.

Owns the judgement rules: percentile gates are judged on exceedance counts with exact one-sided
binomial bounds (pass when the upper bound of P(bad) is under the allowed share, fail when the
lower bound is over it, inconclusive otherwise); means and shares on their interval; peaks,
counts and finals as points; histogram estimates only at a bucket bound; and how a fail level and
a warn level combine into one status. It does not know gates, profiles, baselines or run files
(`gate.verdicts.judge`), and returns data only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate import glossary
from gate.metrics.measurements import (
    Events,
    Histogram,
    Measurement,
    NoData,
    Samples,
    Scalar,
    Series,
)
from gate.sequential import anytime_share_exceeds
from gate.stats import Bounds, mean_bounds, proportion_bounds, quantile_with_bounds, two_sided
from gate.units import Threshold
from gate.verdicts.verdict import Status

__all__ = ["Assessment", "assess", "bounds_judgement", "combine", "monitor_interval", "point_value"]


@dataclass(frozen=True, kw_only=True)
class Assessment:
    outcome: str  # pass | fail | inconclusive | no_data
    value: float | None = None
    n: int = 0
    interval: tuple[float, float] | None = None
    estimate: bool = False
    reason: str = ""


def monitor_interval(
    measurement: Measurement, statistic: str, confidence: float
) -> tuple[float, float] | None:
    """The two-sided interval of a statistic judged against no threshold (a monitor gate, the
    objective of `batchgate tune`): exact order-statistic bounds for percentiles, the skew-aware
    bound for means, exact binomial bounds for shares; for a rate of events, a normal bound that
    treats the requests as a Poisson count (tokens come in requests, so fewer, larger requests
    widen it). None where none applies."""
    level = two_sided(confidence)
    if isinstance(measurement, Samples) and len(measurement.values):
        values = measurement.values
        if statistic in glossary.PERCENTILES:
            _, qb = quantile_with_bounds(values, glossary.PERCENTILES[statistic], confidence=level)
            return (qb.lower, qb.upper)
        if statistic == "mean":
            b = mean_bounds(values, confidence=level)
            return (b.lower, b.upper)
        return None
    if isinstance(measurement, Events) and measurement.total:
        if statistic == "mean":
            b = proportion_bounds(measurement.hits, measurement.total, confidence=level)
            return (b.lower, b.upper)
        if statistic == "rate" and measurement.window_seconds > 0:
            # Requests arrive as a Poisson count; each carries hits/total of the events on
            # average (1 or 0 for goodput, many tokens for output_tokens): var ~ hits * max(1, k).
            z = _normal_quantile(level)  # `level` is already one-sided (two_sided above)
            per_request = measurement.hits / measurement.total
            spread = z * math.sqrt(measurement.hits * max(1.0, per_request))
            seconds = measurement.window_seconds
            rate = measurement.hits / seconds
            return (max(0.0, rate - spread / seconds), rate + spread / seconds)
    return None


def _normal_quantile(p: float) -> float:
    # Bisection on erf: plenty for the few calls a run makes.
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def point_value(measurement: Measurement, statistic: str) -> float | None:
    """The statistic's point value (no judgement), e.g. for storing in a baseline."""
    if isinstance(measurement, Samples):
        values = measurement.values
        if len(values) == 0:
            return None
        if statistic in glossary.PERCENTILES:
            return float(np.quantile(values, glossary.PERCENTILES[statistic]))
        return float(np.max(values) if statistic == "max" else np.mean(values))
    if isinstance(measurement, Histogram):
        if statistic in glossary.PERCENTILES:
            return _histogram_quantile(measurement, glossary.PERCENTILES[statistic])
        return measurement.total_sum / measurement.count if measurement.count else None
    if isinstance(measurement, Events):
        if statistic in ("count", "delta"):
            return float(measurement.hits)
        if statistic == "rate":
            return (
                measurement.hits / measurement.window_seconds
                if measurement.window_seconds > 0
                else None
            )
        return measurement.hits / measurement.total if measurement.total else None
    if isinstance(measurement, Series):
        if len(measurement.values) == 0:
            return None
        reduce = {"peak": np.max, "mean": np.mean, "final": lambda v: v[-1]}[statistic]
        return float(reduce(measurement.values))
    if isinstance(measurement, Scalar):
        return measurement.value
    return None


def _histogram_quantile(hist: Histogram, q: float) -> float | None:
    count = hist.count
    if count == 0:
        return None
    rank = q * count
    index = int(np.searchsorted(hist.cumulative, rank, side="left"))
    if index >= len(hist.bounds) or math.isinf(hist.bounds[index]):
        finite = hist.bounds[np.isfinite(hist.bounds)]
        return float(finite[-1]) if len(finite) else None  # beyond the last bucket: its bound
    lower_bound = hist.bounds[index - 1] if index > 0 else 0.0
    lower_count = hist.cumulative[index - 1] if index > 0 else 0.0
    width = hist.cumulative[index] - lower_count
    fraction = (rank - lower_count) / width if width > 0 else 1.0
    return float(lower_bound + (hist.bounds[index] - lower_bound) * fraction)


def bounds_judgement(threshold: Threshold, bounds: Bounds) -> str:
    if threshold.op == "==":
        return "inconclusive"
    good_side, bad_side = (
        (bounds.upper, bounds.lower) if threshold.is_upper_limit else (bounds.lower, bounds.upper)
    )
    if threshold.holds(good_side):
        return "pass"
    if not threshold.holds(bad_side):
        return "fail"
    return "inconclusive"


def _point(value: float | None, threshold: Threshold, n: int, **extra: Any) -> Assessment:
    if value is None or math.isnan(value):
        return Assessment(outcome="no_data", reason="no value in this scope", n=n)
    return Assessment(
        outcome="pass" if threshold.holds(value) else "fail", value=value, n=n, **extra
    )


def assess(
    measurement: Measurement,
    statistic: str,
    threshold: Threshold,
    confidence: float,
    *,
    sequential: bool = False,
) -> Assessment:
    """Judge one measurement's statistic against one threshold level (pure).

    `sequential`: the data is still growing and is judged again and again (abort_on_fail). A
    FAIL then needs an anytime-valid bound (`gate.sequential`), so that looking every second
    does not spend the error rate again at each look; a mean, which has none, never fails then.
    """
    judged = _assess(measurement, statistic, threshold, confidence)
    if not sequential or judged.outcome != "fail":
        return judged
    return _sequential_fail(measurement, statistic, threshold, confidence, judged)


def _sequential_fail(
    measurement: Measurement,
    statistic: str,
    threshold: Threshold,
    confidence: float,
    judged: Assessment,
) -> Assessment:
    """Keep a one-shot FAIL only when the anytime-valid rule agrees (else inconclusive)."""
    bad_and_total = _bad_share(measurement, statistic, threshold)
    if bad_and_total is None:
        # Point values (max, count, peak, a scalar) are facts of the data seen, not estimates:
        # looking again cannot make them wrong. A mean has no anytime-valid bound: never abort.
        if statistic == "mean" and isinstance(measurement, (Samples, Histogram, Events)):
            return dataclasses.replace(
                judged,
                outcome="inconclusive",
                reason="a mean is not judged while the run is in progress",
            )
        return judged
    bad, total, allowed = bad_and_total
    if anytime_share_exceeds(bad, total, allowed, confidence=confidence):
        return judged
    return dataclasses.replace(
        judged,
        outcome="inconclusive",
        reason=(
            f"{bad} of {total} on the wrong side: past the limit for one look, not yet for an "
            "anytime-valid bound (the run is still being watched)"
        ),
    )


def _bad_share(
    measurement: Measurement, statistic: str, threshold: Threshold
) -> tuple[int, int, float] | None:
    """(samples on the wrong side, total, the share allowed there) for share-like judgements."""
    if isinstance(measurement, Samples) and statistic in glossary.PERCENTILES:
        q = glossary.PERCENTILES[statistic]
        n = len(measurement.values)
        bad = int(n - np.count_nonzero(_holds_array(threshold, measurement.values)))
        return bad, n, (1.0 - q if threshold.is_upper_limit else q)
    if isinstance(measurement, Histogram) and statistic in glossary.PERCENTILES:
        q = glossary.PERCENTILES[statistic]
        matches = np.nonzero(np.isclose(measurement.bounds, threshold.value, rtol=1e-9))[0]
        if len(matches) == 0:
            return None
        n = measurement.count
        at_or_below = float(measurement.cumulative[matches[0]])
        bad = round(n - at_or_below) if threshold.is_upper_limit else round(at_or_below)
        return int(bad), int(n), (1.0 - q if threshold.is_upper_limit else q)
    if isinstance(measurement, Events) and statistic not in ("count", "delta", "rate"):
        hits, total = measurement.hits, measurement.total
        if threshold.is_upper_limit:
            return hits, total, threshold.value
        return total - hits, total, 1.0 - threshold.value
    return None


def _assess(
    measurement: Measurement, statistic: str, threshold: Threshold, confidence: float
) -> Assessment:
    if isinstance(measurement, NoData):
        return Assessment(outcome="no_data", reason=measurement.reason)
    if isinstance(measurement, Samples):
        assessment = _assess_samples(measurement, statistic, threshold, confidence)
        if measurement.note:
            reason = "; ".join(r for r in (assessment.reason, measurement.note) if r)
            assessment = dataclasses.replace(assessment, reason=reason)
        return assessment
    if isinstance(measurement, Histogram):
        return _assess_histogram(measurement, statistic, threshold, confidence)
    if isinstance(measurement, Events):
        if statistic in ("count", "delta", "rate"):
            if statistic == "rate" and measurement.window_seconds <= 0:
                return Assessment(outcome="no_data", reason="the scope covers no time")
            return _point(point_value(measurement, statistic), threshold, measurement.total)
        if measurement.total == 0:
            return Assessment(outcome="no_data", reason="empty scope: no requests")
        value = measurement.hits / measurement.total
        if threshold.op == "==":
            return _point(value, threshold, measurement.total)
        bounds = proportion_bounds(measurement.hits, measurement.total, confidence=confidence)
        shown = proportion_bounds(
            measurement.hits, measurement.total, confidence=two_sided(confidence)
        )
        return Assessment(
            outcome=bounds_judgement(threshold, bounds),
            value=value,
            n=measurement.total,
            interval=(shown.lower, shown.upper),
            reason=f"{measurement.hits} of {measurement.total} requests",
        )
    if isinstance(measurement, Series):
        values = measurement.values
        if threshold.of_total:
            if measurement.totals is None or np.all(np.isnan(measurement.totals)):
                return Assessment(
                    outcome="no_data", reason="no device total to take a % of (CPU fallback?)"
                )
            # A record without a device total (a CPU-fallback sample among NVML ones) says
            # nothing about the share: judge the records that have one.
            values = values / measurement.totals
            values = values[~np.isnan(values)]
        if len(values) == 0:
            return Assessment(outcome="no_data", reason="no samples in this window")
        return _point(
            point_value(Series(values=values), statistic),
            threshold,
            len(values),
            reason=measurement.note or "",
        )
    assert isinstance(measurement, Scalar)
    if measurement.lower_bound and threshold.is_upper_limit and threshold.holds(measurement.value):
        return Assessment(
            outcome="inconclusive",
            value=measurement.value,
            n=measurement.n,
            reason=f"at least {measurement.value:.4g}: {measurement.note}",
        )
    return _point(measurement.value, threshold, measurement.n, reason=measurement.note or "")


def _assess_samples(
    measurement: Samples, statistic: str, threshold: Threshold, confidence: float
) -> Assessment:
    values, n = measurement.values, len(measurement.values)
    if n == 0:
        return Assessment(outcome="no_data", reason="empty scope: no samples")
    if statistic == "max":
        return _point(float(np.max(values)), threshold, n, estimate=measurement.estimate)
    if statistic == "mean":
        shown = mean_bounds(values, confidence=two_sided(confidence))
        if threshold.op == "==":
            # No interval confirms an equality, so bounds would leave it inconclusive forever
            # (a pass under --inconclusive pass): the mean itself is compared, as a share is.
            mean = float(np.mean(values))
            return _point(mean, threshold, n, interval=(shown.lower, shown.upper))
        bounds = mean_bounds(values, confidence=confidence)
        return Assessment(
            outcome=bounds_judgement(threshold, bounds),
            value=float(np.mean(values)),
            n=n,
            interval=(shown.lower, shown.upper),
        )
    q = glossary.PERCENTILES[statistic]
    value, qb = quantile_with_bounds(values, q, confidence=two_sided(confidence))
    if threshold.op == "==":
        return _point(value, threshold, n)
    bad = int(n - np.count_nonzero(_holds_array(threshold, values)))
    allowed = 1.0 - q if threshold.is_upper_limit else q
    share = proportion_bounds(bad, n, confidence=confidence)
    outcome = (
        "pass" if share.upper < allowed else "fail" if share.lower > allowed else "inconclusive"
    )
    reason = (
        f"{bad} of {n} samples on the wrong side; "
        f"share bounds [{share.lower:.4g}, {share.upper:.4g}] vs {allowed:.4g}"
    )
    return Assessment(
        outcome=outcome, value=value, n=n, interval=(qb.lower, qb.upper), reason=reason
    )


def _holds_array(threshold: Threshold, values: np.ndarray) -> np.ndarray:
    ops = {
        "<": np.less,
        "<=": np.less_equal,
        ">": np.greater,
        ">=": np.greater_equal,
        "==": np.equal,
    }
    return ops[threshold.op](values, threshold.value)


def _assess_histogram(
    hist: Histogram, statistic: str, threshold: Threshold, confidence: float
) -> Assessment:
    n = hist.count
    if n == 0:
        return Assessment(
            outcome="no_data", reason="the histogram saw no observations in the window"
        )
    if statistic == "max":
        return Assessment(
            outcome="no_data", reason="a max needs exact step records, not a histogram"
        )
    if statistic == "mean":
        return _point(hist.total_sum / n, threshold, n, estimate=True, reason="histogram estimate")
    q = glossary.PERCENTILES[statistic]
    value = _histogram_quantile(hist, q)
    matches = np.nonzero(np.isclose(hist.bounds, threshold.value, rtol=1e-9, atol=1e-12))[0]
    if len(matches) == 0 or threshold.op == "==":
        return Assessment(
            outcome="inconclusive",
            value=value,
            n=n,
            estimate=True,
            reason="threshold is not a bucket bound: the histogram cannot resolve it",
        )
    at_or_below = float(hist.cumulative[matches[0]])
    bad = round(n - at_or_below) if threshold.is_upper_limit else round(at_or_below)
    allowed = 1.0 - q if threshold.is_upper_limit else q
    share = proportion_bounds(bad, n, confidence=confidence)
    outcome = (
        "pass" if share.upper < allowed else "fail" if share.lower > allowed else "inconclusive"
    )
    # Shown like every other interval: two-sided at the confidence level.
    shown = proportion_bounds(bad, n, confidence=two_sided(confidence))
    return Assessment(
        outcome=outcome,
        value=value,
        n=n,
        estimate=True,
        interval=(shown.lower, shown.upper),
        reason=f"histogram estimate: {bad} of {n} beyond the bucket bound",
    )


def combine(fail: Assessment | None, warn: Assessment | None) -> tuple[Status, Assessment]:
    if fail is not None:
        if fail.outcome != "pass" or warn is None:
            return Status(fail.outcome), fail
        return (Status.WARN if warn.outcome == "fail" else Status.PASS), fail
    assert warn is not None
    # A warn-only gate cannot fail the run: anything short of a confident pass is a warning.
    if warn.outcome == "no_data":
        return Status.NO_DATA, warn
    return (Status.PASS if warn.outcome == "pass" else Status.WARN), warn
