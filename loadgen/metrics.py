"""Derived per-request metrics (DESIGN.md §5) and percentiles, computed one way.

Owns TTFT, TTFT from planned, E2E (and from planned), TPOT, ITL pooling, schedule lag and the
percentile function, all from record dicts in the docs/records.md format. It does not read files
or decide pass/fail; the gate has its own reader (`gate.derive`) using the same formulas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "e2e",
    "e2e_from_planned",
    "itl_gaps",
    "percentile",
    "schedule_lag",
    "summarize",
    "tpot",
    "ttft",
    "ttft_from_planned",
]

Record = dict[str, Any]


def _diff(rec: Record, end: str, start: str) -> float | None:
    if rec.get(end) is None or rec.get(start) is None:
        return None
    return float(rec[end]) - float(rec[start])


def ttft(rec: Record) -> float | None:
    return _diff(rec, "first_token_at", "sent_at")


def ttft_from_planned(rec: Record) -> float | None:
    return _diff(rec, "first_token_at", "planned_at")


def e2e(rec: Record) -> float | None:
    return _diff(rec, "done_at", "sent_at") if rec.get("status") == "ok" else None


def e2e_from_planned(rec: Record) -> float | None:
    return _diff(rec, "done_at", "planned_at") if rec.get("status") == "ok" else None


def schedule_lag(rec: Record) -> float | None:
    return _diff(rec, "sent_at", "planned_at")


def tpot(rec: Record) -> float | None:
    out = rec.get("output_tokens")
    span = _diff(rec, "done_at", "first_token_at")
    if span is None or out is None or out <= 1 or rec.get("status") != "ok":
        return None
    return span / (out - 1)


def itl_gaps(rec: Record) -> list[float]:
    """A chunk carrying k tokens after a gap dt contributes k gaps of dt/k."""
    times, tokens = rec.get("chunk_times") or [], rec.get("chunk_tokens") or []
    gaps: list[float] = []
    for prev, cur, k in zip(times, times[1:], tokens[1:], strict=False):
        if k > 0:
            gaps.extend([(cur - prev) / k] * k)
    return gaps


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values. Not rounded."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Iterable[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    return {
        "count": float(len(vals)),
        "p50": percentile(vals, 50),
        "p90": percentile(vals, 90),
        "p99": percentile(vals, 99),
        "max": max(vals) if vals else None,
    }
