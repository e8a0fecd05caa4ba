"""How a fail level and a warn level combine into one status (`combine`), how a pair of one-sided
bounds is read against a threshold (`bounds_judgement`), and point values of samples."""

import math

import numpy as np
import pytest

from gate.metrics.measurements import Samples
from gate.stats import Bounds
from gate.units import Threshold, UnitKind
from gate.verdicts.assess import Assessment, bounds_judgement, combine, point_value
from gate.verdicts.verdict import Status


def limit(op: str, value: float) -> Threshold:
    return Threshold(op=op, value=value, kind=UnitKind.COUNT, text=f"{op} {value}")


def outcome(name: str) -> Assessment:
    return Assessment(outcome=name, value=1.0, reason=name)


OUTCOMES = ["pass", "fail", "inconclusive", "no_data"]


# --- combine: fail level with or without a warn level --------------------------------------------


@pytest.mark.parametrize("name", OUTCOMES)
def test_fail_level_alone_decides_the_status(name):
    fail = outcome(name)
    status, shown = combine(fail, None)
    assert status is Status(name)
    assert shown is fail


@pytest.mark.parametrize("fail_outcome", ["fail", "inconclusive", "no_data"])
@pytest.mark.parametrize("warn_outcome", OUTCOMES)
def test_a_fail_level_short_of_pass_wins_over_any_warn_level(fail_outcome, warn_outcome):
    fail = outcome(fail_outcome)
    status, shown = combine(fail, outcome(warn_outcome))
    assert status is Status(fail_outcome)
    assert shown is fail


def test_passing_fail_level_with_failing_warn_level_warns_and_shows_the_fail_level():
    fail, warn = outcome("pass"), outcome("fail")
    status, shown = combine(fail, warn)
    assert status is Status.WARN
    assert shown is fail


@pytest.mark.parametrize("warn_outcome", ["pass", "inconclusive", "no_data"])
def test_passing_fail_level_passes_unless_the_warn_level_surely_fails(warn_outcome):
    fail = outcome("pass")
    status, shown = combine(fail, outcome(warn_outcome))
    assert status is Status.PASS
    assert shown is fail


# --- combine: warn-only gates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("warn_outcome", "status"),
    [
        ("pass", Status.PASS),
        ("fail", Status.WARN),
        ("inconclusive", Status.WARN),  # anything short of a confident pass is a warning
        ("no_data", Status.NO_DATA),
    ],
)
def test_a_warn_only_gate_never_fails(warn_outcome, status):
    warn = outcome(warn_outcome)
    got, shown = combine(None, warn)
    assert got is status
    assert shown is warn


def test_combine_needs_at_least_one_level():
    with pytest.raises(AssertionError):
        combine(None, None)


# --- bounds_judgement -----------------------------------------------------------------------------

BOUNDS = Bounds(lower=1.0, upper=2.0, confidence=0.95)


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("<", 3.0, "pass"),  # upper bound under the limit
        ("<", 0.5, "fail"),  # lower bound over the limit
        ("<", 1.5, "inconclusive"),
        ("<", 2.0, "inconclusive"),  # the upper bound must be strictly under a "<"
        ("<=", 2.0, "pass"),
        ("<", 1.0, "fail"),  # lower bound at a "<" limit is already on the bad side
        ("<=", 1.0, "inconclusive"),
        (">", 0.5, "pass"),  # lower bound over the limit
        (">", 3.0, "fail"),  # upper bound under the limit
        (">", 1.5, "inconclusive"),
        (">", 1.0, "inconclusive"),
        (">=", 1.0, "pass"),
        (">", 2.0, "fail"),
        (">=", 2.0, "inconclusive"),
        ("==", 1.5, "inconclusive"),  # an interval never proves equality
    ],
)
def test_bounds_judgement_reads_the_bound_on_each_side_of_the_limit(op, value, expected):
    assert bounds_judgement(limit(op, value), BOUNDS) == expected


def test_equality_is_inconclusive_even_for_a_degenerate_interval():
    point = Bounds(lower=1.0, upper=1.0, confidence=0.95)
    assert bounds_judgement(limit("==", 1.0), point) == "inconclusive"


def test_unbounded_interval_is_inconclusive():
    unbounded = Bounds(lower=-math.inf, upper=math.inf, confidence=0.95)
    assert bounds_judgement(limit("<", 1.0), unbounded) == "inconclusive"
    assert bounds_judgement(limit(">", 1.0), unbounded) == "inconclusive"


# --- point_value of samples -----------------------------------------------------------------------

VALUES = Samples(values=np.array([4.0, 1.0, 3.0, 2.0, 10.0]))


def test_point_value_of_samples():
    assert point_value(VALUES, "p50") == 3.0
    assert point_value(VALUES, "p75") == 4.0
    assert point_value(VALUES, "p90") == pytest.approx(4.0 + 0.6 * 6.0)  # numpy's linear rule
    assert point_value(VALUES, "max") == 10.0
    assert point_value(VALUES, "mean") == 4.0


def test_point_value_of_no_samples_is_none():
    for statistic in ("p50", "max", "mean"):
        assert point_value(Samples(values=np.array([])), statistic) is None
