"""Checks of one trace field's value, with the error message that points at the file and line.

Owns the wording of every per-line trace error (`FILE:LINE: FIELD: problem, got VALUE`) and the
hand-made parser of Azure's wall-clock timestamps (integer nanoseconds, so the 100 ns digits
survive). It does not know which fields a format has (`loadgen.traces.formats`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

from loadgen.errors import ConfigError

__all__ = [
    "LineError",
    "as_count",
    "as_hash_ids",
    "as_id",
    "as_seconds",
    "parse_wall_clock_ns",
    "shown",
]

_WALL_CLOCK = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|\+00:00)?"
)
_NS_PER_SECOND = 1_000_000_000
_INT_ONLY = {int}


def shown(value: Any) -> str:
    """A value as it reads in the file: JSON for JSON values, quoted text for CSV cells."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class LineError:
    """Builds the ConfigError of one line: `FILE:LINE: FIELD: problem, got VALUE`."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, line: int, field: str | None, problem: str) -> ConfigError:
        prefix = f"{self.where}:{line}: " + (f"{field}: " if field else "")
        return ConfigError(prefix + problem)


def as_count(error: LineError, line: int, field: str, value: Any, minimum: int) -> int:
    """An integer token count >= minimum, from a JSON number or a CSV cell ("12" or "12.0")."""
    number: Any = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                number = None
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)  # exports through pandas write counts as 12.0
    if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
        raise error(line, field, f"must be an integer >= {minimum}, got {shown(value)}")
    return number


def as_seconds(error: LineError, line: int, field: str, value: Any, unit: str = "") -> float:
    """A finite number >= 0 (a timestamp from the trace start), from JSON or a CSV cell."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if (
        isinstance(number, bool)
        or not isinstance(number, (int, float))
        or not math.isfinite(number)
        or number < 0
    ):
        what = f"a number >= 0{unit}"
        raise error(line, field, f"must be {what}, got {shown(value)}")
    return float(number)


def as_hash_ids(error: LineError, line: int, field: str, value: Any) -> tuple[int, ...]:
    # set(map(type, ...)) runs in C: a 12k-line trace holds 300k ids (bools are not ints here).
    if not isinstance(value, list) or not set(map(type, value)) <= _INT_ONLY:
        raise error(line, field, f"must be a list of integers, got {shown(value)}")
    return tuple(value)


def as_id(error: LineError, line: int, field: str, value: Any) -> str:
    """A conversation or chat id: an integer or a non-empty string, kept as text."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise error(line, field, f"must be an integer or a non-empty string, got {shown(value)}")
    return str(value)


def parse_wall_clock_ns(text: str, ordinals: dict[str, int]) -> int | None:
    """`2023-11-16 18:15:46.6805900` as integer nanoseconds since 0001-01-01, None if malformed.

    By hand rather than via datetime (microseconds only) or a float of the whole value (about
    0.1 µs resolution at today's epoch seconds): Azure writes 7 fractional digits (100 ns).
    `ordinals` caches the day number of each date string (a trace spans a few days at most).
    """
    match = _WALL_CLOCK.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    date = year + month + day
    ordinal = ordinals.get(date)
    if ordinal is None:
        try:
            ordinal = dt.date(int(year), int(month), int(day)).toordinal()
        except ValueError:
            return None
        ordinals[date] = ordinal
    h, m, s = int(hour), int(minute), int(second)
    if h > 23 or m > 59 or s > 60:  # 60: a leap second, as some loggers write it
        return None
    seconds = ordinal * 86_400 + h * 3_600 + m * 60 + s
    return seconds * _NS_PER_SECOND + (int(fraction.ljust(9, "0")) if fraction else 0)
