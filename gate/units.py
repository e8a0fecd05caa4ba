"""Threshold text of gates.yaml: `"< 800ms"`, `"<= 0.05"`, `"< 90%"`, `"< 20GiB"`, `"< 3x"`.

Owns parsing a threshold into a comparison and a value in base units (seconds, bytes, ratio
0..1, count, per second, factor) and formatting values back for people. It does not know which
metric a threshold belongs to: callers pass the unit kind the metric's statistic is measured in.
"""

from __future__ import annotations

import enum
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "Threshold",
    "UnitError",
    "UnitKind",
    "format_value",
    "parse_quantity",
    "parse_threshold",
]


class UnitError(BatchgateError, ValueError):
    """A threshold or quantity that cannot be read; the message says what to write instead."""

    default_exit_code = ExitCode.INVALID_GATES


class UnitKind(str, enum.Enum):
    DURATION = "duration"  # seconds
    BYTES = "bytes"
    RATIO = "ratio"  # 0..1
    COUNT = "count"
    RATE = "rate"  # per second
    FACTOR = "factor"  # dimensionless multiple, written "3x"


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
}
_BYTE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_NOUN = {
    UnitKind.DURATION: "time",
    UnitKind.BYTES: "size",
    UnitKind.COUNT: "count",
    UnitKind.RATE: "rate",
}
_NEVER_NEGATIVE = tuple(_NOUN)
_RATE_UNITS = {"/s": 1.0, "rps": 1.0, "req/s": 1.0, "tok/s": 1.0, "per_s": 1.0}

_THRESHOLD_RE = re.compile(
    r"^\s*(<=|>=|==|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$"
)
_QUANTITY_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


@dataclass(frozen=True, kw_only=True)
class Threshold:
    """`value` is in the base unit of `kind`; `of_total` means a `%` of device total (bytes)."""

    op: str
    value: float
    kind: UnitKind
    text: str
    of_total: bool = False
    # "unloaded": `value` is a factor of the calibration's unloaded median of the gate's metric;
    # "capacity": of its saturation rate (calibration.json). The judge turns it into an
    # absolute limit before judging.
    reference: str | None = None

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise UnitError(f"unknown comparison {self.op!r}")

    def holds(self, observed: float) -> bool:
        """Whether `observed` (same base unit) satisfies the threshold."""
        return bool(_OPS[self.op](observed, self.value))

    @property
    def is_upper_limit(self) -> bool:
        """True for `<`/`<=`: larger observations are the bad direction."""
        return self.op in ("<", "<=")

    def with_value(self, value: float, *, text: str | None = None) -> Threshold:
        shown = text if text is not None else f"{self.op} {format_value(value, self.kind)}"
        return Threshold(op=self.op, value=value, kind=self.kind, text=shown, of_total=False)


def _number_and_unit(match: re.Match[str], group_number: int) -> tuple[float, str]:
    number = float(match.group(group_number))
    if not math.isfinite(number):
        raise UnitError("the number must be finite")
    return number, match.group(group_number + 1)


def parse_quantity(
    text: str | int | float, *, kind: UnitKind, allow_percent: bool = False
) -> float:
    """A bare quantity such as `5ms`, `2GiB`, `10%` in base units (no comparison)."""
    if isinstance(text, bool):
        raise UnitError(f"expected a {kind.value} quantity, got a boolean")
    if isinstance(text, (int, float)):
        text = repr(text)
    match = _QUANTITY_RE.match(text)
    if not match:
        raise UnitError(f"cannot read {text!r} as a {kind.value} quantity")
    number, unit = _number_and_unit(match, 1)
    value, _ = _apply_unit(number, unit, kind, text, allow_percent_of_total=allow_percent)
    return value


REFERENCES = ("unloaded", "capacity", "ideal")
_RELATIVE_RE = re.compile(
    r"^\s*(<=|>=|==|<|>)\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*x\s+([a-z_]+)\s*$"
)


def parse_threshold(text: object, *, kind: UnitKind) -> Threshold:
    """Parse `"< 800ms"` (or `"< 4x unloaded"`) for a metric measured in `kind`; raises
    UnitError with a fix."""
    if not isinstance(text, str):
        raise UnitError(
            f'a threshold is a quoted comparison such as "< 800ms" or "<= 0.05", got {text!r}'
        )
    relative = _RELATIVE_RE.match(text)
    if relative:
        op, number, reference = relative.group(1), float(relative.group(2)), relative.group(3)
        if reference not in REFERENCES:
            raise UnitError(
                f"unknown reference {reference!r} in {text!r}; use {', '.join(REFERENCES)} "
                '(e.g. "< 4x unloaded": four times the calibrated unloaded median; '
                '"> 0.4x capacity": 40% of the calibrated saturation rate)'
            )
        if reference == "unloaded" and kind is not UnitKind.DURATION:
            raise UnitError(
                f"{text!r}: a multiple of the unloaded service time fits only time metrics "
                "(ttft, e2e, tpot, itl, ...)"
            )
        if reference == "capacity" and kind is not UnitKind.RATE:
            raise UnitError(
                f"{text!r}: a fraction of the calibrated capacity fits only rate metrics "
                "(batch_job_output_tokens_per_second, achieved_rate)"
            )
        if reference == "ideal" and kind is not UnitKind.RATIO:
            raise UnitError(
                f"{text!r}: a fraction of the ideal fits only prefix_cache_hit_ratio (the hit "
                "ratio an LRU of the target's KV capacity gets on the replayed trace window)"
            )
        if not math.isfinite(number) or number <= 0:
            raise UnitError(f"{text!r}: the factor must be a positive number")
        return Threshold(op=op, value=number, kind=kind, text=text.strip(), reference=reference)
    match = _THRESHOLD_RE.match(text)
    if not match:
        raise UnitError(
            f"cannot read threshold {text!r}: write a comparison (<, <=, >, >=, ==), "
            'a number and a unit, e.g. "< 800ms"'
        )
    op = match.group(1)
    number, unit = _number_and_unit(match, 2)
    value, of_total = _apply_unit(number, unit, kind, text, allow_percent_of_total=True)
    if value < 0 and kind in _NEVER_NEGATIVE:
        # No measured duration, size, count or rate is below zero: such a gate could never pass
        # (<, <=, ==) or could never fail (>, >=), and either is a typo, not a limit.
        never = "pass" if op in ("<", "<=", "==") else "fail"
        raise UnitError(
            f"{text!r}: a {_NOUN[kind]} is never negative, so this gate could never {never}"
        )
    return Threshold(op=op, value=value, kind=kind, text=text.strip(), of_total=of_total)


def _apply_unit(
    number: float, unit: str, kind: UnitKind, text: str, *, allow_percent_of_total: bool
) -> tuple[float, bool]:
    lowered = unit.lower()
    if kind is UnitKind.DURATION:
        if not unit:
            if number == 0:
                return 0.0, False
            raise UnitError(f'{text!r} needs a time unit (ns, us, ms, s, min, h), e.g. "< 800ms"')
        if unit not in _DURATION_UNITS:
            raise UnitError(f"unknown time unit {unit!r} in {text!r}; use ns, us, ms, s, min or h")
        return number * _DURATION_UNITS[unit], False
    if kind is UnitKind.BYTES:
        if unit == "%":
            if not allow_percent_of_total:
                raise UnitError(f"{text!r}: a percentage is not a size here")
            return _percent(number, text), True
        if not unit:
            if number == 0:
                return 0.0, False
            raise UnitError(
                f"{text!r} needs a size unit (B, MB, GB, MiB, GiB) or % of device total"
            )
        if lowered not in _BYTE_UNITS:
            raise UnitError(
                f"unknown size unit {unit!r} in {text!r}; use B, KB, MB, GB, KiB, MiB, GiB"
            )
        return number * _BYTE_UNITS[lowered], False
    if kind is UnitKind.RATIO:
        if unit == "%":
            return _percent(number, text), False
        if unit:
            raise UnitError(
                f'{text!r}: a ratio takes no unit other than %, e.g. "< 5%" or "< 0.05"'
            )
        if not 0.0 <= number <= 1.0:
            raise UnitError(f"{text!r}: a ratio lies in 0..1; write a percentage with % (e.g. 5%)")
        return number, False
    if kind is UnitKind.COUNT:
        if unit:
            raise UnitError(f"{text!r}: a count takes no unit")
        return number, False
    if kind is UnitKind.RATE:
        if unit and lowered not in _RATE_UNITS:
            raise UnitError(f'{text!r}: a rate is per second; write e.g. "> 5/s" or "> 5"')
        return number, False
    if kind is UnitKind.FACTOR:
        if lowered != "x":
            raise UnitError(f'{text!r}: a ratio between two scopes is written with x, e.g. "< 3x"')
        if number <= 0:
            raise UnitError(f"{text!r}: a factor must be positive")
        return number, False
    raise UnitError(f"unknown unit kind {kind!r}")  # pragma: no cover - enum is closed


def _percent(number: float, text: str) -> float:
    if not 0.0 <= number <= 100.0:
        raise UnitError(f"{text!r}: a percentage lies in 0..100")
    return number / 100.0


def format_value(value: float | None, kind: UnitKind, *, of_total: bool = False) -> str:
    """Human form of a base-unit value: 0.8123 s -> '812.3ms', 2**31 B -> '2.00GiB'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if of_total or kind is UnitKind.RATIO:
        return f"{value * 100:.3g}%"
    if kind is UnitKind.DURATION:
        magnitude = abs(value)
        if magnitude >= 60:
            return f"{value:.1f}s"
        if magnitude >= 1:
            return f"{value:.3g}s"
        if magnitude >= 1e-3 or magnitude == 0:
            return f"{value * 1e3:.4g}ms"
        return f"{value * 1e6:.4g}µs"
    if kind is UnitKind.BYTES:
        for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if abs(value) >= size:
                return f"{value / size:.3g}{unit}"
        return f"{value:.0f}B"
    if kind is UnitKind.FACTOR:
        return f"{value:.3g}x"
    if kind is UnitKind.RATE:
        return f"{value:.4g}/s"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.4g}"
