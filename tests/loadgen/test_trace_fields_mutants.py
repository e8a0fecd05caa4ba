"""loadgen.traces.fields, value by value: the exact error text of each check, the boundaries
(the minimum count, 0 seconds, the 60-character cut of a shown value, 23:59:60), and Azure's
wall clock in integer nanoseconds against datetime."""

from __future__ import annotations

import datetime as dt

import pytest

from loadgen.errors import ConfigError
from loadgen.traces.fields import (
    LineError,
    as_count,
    as_hash_ids,
    as_id,
    as_seconds,
    parse_wall_clock_ns,
    shown,
)

ERROR = LineError("t.csv")


def _message(call, *args) -> str:
    with pytest.raises(ConfigError) as caught:
        call(ERROR, 7, "F", *args)
    return str(caught.value)


def test_shown_is_json_unescaped_and_cut_at_60_characters() -> None:
    assert shown("é") == '"é"'  # ensure_ascii=False
    assert shown(None) == "null" and shown(True) == "true" and shown(1.5) == "1.5"
    assert shown("a" * 58) == '"' + "a" * 58 + '"'  # 60 characters: kept whole
    assert shown("a" * 59) == '"' + "a" * 56 + "..."  # 61: cut to 57 + ...
    assert len(shown("a" * 59)) == 60


def test_shown_falls_back_to_repr_for_what_json_cannot_write() -> None:
    assert shown({1, 2}) == "{1, 2}"  # TypeError
    loop: list = []
    loop.append(loop)
    assert shown(loop) == "[[...]]"  # ValueError: circular reference


def test_a_line_error_names_file_line_and_field() -> None:
    error = LineError("x/trace.jsonl")
    assert error.where == "x/trace.jsonl"
    assert str(error(3, "turn", "bad")) == "x/trace.jsonl:3: turn: bad"
    assert str(error(4, None, "bad")) == "x/trace.jsonl:4: bad"
    assert str(error(5, "", "bad")) == "x/trace.jsonl:5: bad"
    assert isinstance(error(1, None, "x"), ConfigError)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, 5), (0, 0), ("12", 12), (" 12 ", 12), ("12.0", 12), (12.0, 12), (" 3.0\t", 3)],
)
def test_as_count_reads_numbers_and_cells(value, expected) -> None:
    got = as_count(ERROR, 1, "F", value, 0)
    assert got == expected and type(got) is int


def test_as_count_accepts_its_minimum_and_refuses_below() -> None:
    assert as_count(ERROR, 1, "F", 1, 1) == 1
    assert as_count(ERROR, 1, "F", "1", 1) == 1
    assert _message(as_count, 0, 1) == "t.csv:7: F: must be an integer >= 1, got 0"
    assert _message(as_count, "-1", 0) == 't.csv:7: F: must be an integer >= 0, got "-1"'


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (True, "true"),
        (False, "false"),
        (1.5, "1.5"),
        ("1.5", '"1.5"'),
        ("x", '"x"'),
        ("", '""'),
        (float("inf"), "Infinity"),
        ("inf", '"inf"'),
        ("nan", '"nan"'),
        (None, "null"),
        ([1], "[1]"),
    ],
)
def test_as_count_refuses_what_is_not_a_whole_number(value, got) -> None:
    assert _message(as_count, value, 0) == f"t.csv:7: F: must be an integer >= 0, got {got}"


@pytest.mark.parametrize(
    ("value", "expected"), [(0, 0.0), (0.0, 0.0), (3, 3.0), (" 2.5 ", 2.5), ("7", 7.0), ("0", 0.0)]
)
def test_as_seconds_reads_numbers_and_cells(value, expected) -> None:
    got = as_seconds(ERROR, 1, "F", value)
    assert got == expected and type(got) is float


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (-0.5, "-0.5"),
        ("-1", '"-1"'),
        (True, "true"),
        (float("inf"), "Infinity"),
        (float("nan"), "NaN"),
        ("inf", '"inf"'),
        ("soon", '"soon"'),
        (None, "null"),
    ],
)
def test_as_seconds_refuses_what_is_not_a_finite_number_from_0(value, got) -> None:
    assert _message(as_seconds, value) == f"t.csv:7: F: must be a number >= 0, got {got}"
    assert _message(as_seconds, value, " (ms)") == (
        f"t.csv:7: F: must be a number >= 0 (ms), got {got}"
    )


def test_as_hash_ids() -> None:
    assert as_hash_ids(ERROR, 1, "F", []) == ()
    assert as_hash_ids(ERROR, 1, "F", [3, 1, 3]) == (3, 1, 3)
    for bad, text in [([True], "[true]"), ([1, 2.0], "[1, 2.0]"), ((1, 2), "[1, 2]"), (5, "5")]:
        assert _message(as_hash_ids, bad) == f"t.csv:7: F: must be a list of integers, got {text}"


def test_as_id() -> None:
    assert as_id(ERROR, 1, "F", 12) == "12" and as_id(ERROR, 1, "F", "c") == "c"
    assert as_id(ERROR, 1, "F", 0) == "0"
    for bad, text in [(True, "true"), ("", '""'), (1.0, "1.0"), (None, "null")]:
        assert _message(as_id, bad) == (
            f"t.csv:7: F: must be an integer or a non-empty string, got {text}"
        )


def _ns(year, month, day, hour=0, minute=0, second=0, fraction_ns=0) -> int:
    ordinal = dt.date(year, month, day).toordinal()
    return ((ordinal * 86_400 + hour * 3_600 + minute * 60 + second) * 1_000_000_000) + fraction_ns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-11-16 18:15:46.6805900", _ns(2023, 11, 16, 18, 15, 46, 680_590_000)),
        ("2023-11-16T18:15:46.6805901Z", _ns(2023, 11, 16, 18, 15, 46, 680_590_100)),
        (" 2023-11-16 18:15:46+00:00 ", _ns(2023, 11, 16, 18, 15, 46)),
        ("2023-11-16 18:15:46.5", _ns(2023, 11, 16, 18, 15, 46, 500_000_000)),
        ("2023-11-16 18:15:46.123456789", _ns(2023, 11, 16, 18, 15, 46, 123_456_789)),
        ("2023-12-31 23:59:59", _ns(2023, 12, 31, 23, 59, 59)),
        ("2023-12-31 23:59:60", _ns(2023, 12, 31, 23, 59, 59) + 1_000_000_000),  # leap second
        ("0001-01-01 00:00:00", _ns(1, 1, 1)),
        ("2024-02-29 01:02:03", _ns(2024, 2, 29, 1, 2, 3)),
    ],
)
def test_wall_clock_in_integer_nanoseconds(text: str, expected: int) -> None:
    got = parse_wall_clock_ns(text, {})
    assert got == expected and type(got) is int


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-16 24:00:00",
        "2023-11-16 23:60:00",
        "2023-11-16 23:59:61",
        "2023-02-30 00:00:00",
        "2023-13-01 00:00:00",
        "2023-11-16",
        "2023-11-16 18:15:46.1234567890",
        "2023-11-16 18:15:46+01:00",
        "16/11/2023 18:15",
        "",
    ],
)
def test_malformed_wall_clocks_are_none(text: str) -> None:
    assert parse_wall_clock_ns(text, {}) is None


def test_the_day_numbers_are_cached_per_date() -> None:
    ordinals: dict[str, int] = {}
    first = parse_wall_clock_ns("2023-11-16 00:00:01", ordinals)
    assert ordinals == {"20231116": dt.date(2023, 11, 16).toordinal()}
    assert first == _ns(2023, 11, 16, second=1)
    # The cache is what is used: a planted ordinal shows through.
    ordinals["20231117"] = 5
    assert parse_wall_clock_ns("2023-11-17 00:00:00", ordinals) == 5 * 86_400 * 1_000_000_000
    assert parse_wall_clock_ns("2023-02-30 00:00:00", ordinals) is None
    assert set(ordinals) == {"20231116", "20231117"}
