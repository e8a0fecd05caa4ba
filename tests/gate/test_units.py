import math

import pytest

from gate.units import UnitError, UnitKind, format_value, parse_quantity, parse_threshold


@pytest.mark.parametrize(
    ("text", "kind", "op", "value", "of_total"),
    [
        ("< 800ms", UnitKind.DURATION, "<", 0.8, False),
        ("<= 2s", UnitKind.DURATION, "<=", 2.0, False),
        ("<250us", UnitKind.DURATION, "<", 250e-6, False),
        ("<= 0.05", UnitKind.RATIO, "<=", 0.05, False),
        ("< 5%", UnitKind.RATIO, "<", 0.05, False),
        ("< 90%", UnitKind.BYTES, "<", 0.9, True),
        ("< 20GiB", UnitKind.BYTES, "<", 20 * 1024**3, False),
        ("< 1.5GB", UnitKind.BYTES, "<", 1.5e9, False),
        ("< 3x", UnitKind.FACTOR, "<", 3.0, False),
        ("== 0", UnitKind.COUNT, "==", 0.0, False),
        ("> 5/s", UnitKind.RATE, ">", 5.0, False),
        (">= 12", UnitKind.RATE, ">=", 12.0, False),
    ],
)
def test_thresholds_parse_into_base_units(text, kind, op, value, of_total):
    threshold = parse_threshold(text, kind=kind)
    assert threshold.op == op
    assert math.isclose(threshold.value, value, rel_tol=1e-12)
    assert threshold.of_total is of_total


@pytest.mark.parametrize(
    ("text", "kind", "fragment"),
    [
        ("< 800", UnitKind.DURATION, "needs a time unit"),
        ("< 20", UnitKind.BYTES, "needs a size unit"),
        ("< 5", UnitKind.RATIO, "lies in 0..1"),
        ("< 3", UnitKind.FACTOR, "written with x"),
        ("800ms", UnitKind.DURATION, "comparison"),
        ("< 8 parsecs", UnitKind.DURATION, "unknown time unit"),
        ("< 5ms", UnitKind.COUNT, "takes no unit"),
        ("< 150%", UnitKind.RATIO, "0..100"),
        # A negative limit on a quantity that is never negative: never passes, or never fails.
        ("< -1s", UnitKind.DURATION, "a time is never negative, so this gate could never pass"),
        ("<= -5ms", UnitKind.DURATION, "could never pass"),
        ("== -1", UnitKind.COUNT, "a count is never negative, so this gate could never pass"),
        ("> -3/s", UnitKind.RATE, "a rate is never negative, so this gate could never fail"),
        (">= -2GiB", UnitKind.BYTES, "a size is never negative, so this gate could never fail"),
    ],
)
def test_thresholds_without_a_needed_unit_or_with_an_impossible_limit_are_errors(
    text, kind, fragment
):
    with pytest.raises(UnitError, match=fragment):
        parse_threshold(text, kind=kind)


def test_non_string_threshold_is_an_error_that_shows_the_form():
    with pytest.raises(UnitError, match="quoted comparison"):
        parse_threshold(0.8, kind=UnitKind.DURATION)


def test_threshold_holds_compares_in_its_direction():
    assert parse_threshold("< 1s", kind=UnitKind.DURATION).holds(0.5)
    assert not parse_threshold("< 1s", kind=UnitKind.DURATION).holds(1.0)
    assert parse_threshold(">= 95%", kind=UnitKind.RATIO).holds(0.95)


def test_quantities_and_formatting_round_trip_for_people():
    assert parse_quantity("5ms", kind=UnitKind.DURATION) == 0.005
    assert parse_quantity("2GiB", kind=UnitKind.BYTES) == 2 * 1024**3
    assert format_value(0.8123, UnitKind.DURATION) == "812.3ms"
    assert format_value(2 * 1024**3, UnitKind.BYTES) == "2GiB"
    assert format_value(0.05, UnitKind.RATIO) == "5%"
    assert format_value(None, UnitKind.RATIO) == "—"
    assert format_value(math.inf, UnitKind.DURATION) == "∞"


def test_zero_and_minus_zero_limits_stay_valid():
    assert parse_threshold("== 0", kind=UnitKind.COUNT).value == 0
    assert parse_threshold("<= -0s", kind=UnitKind.DURATION).value == 0
