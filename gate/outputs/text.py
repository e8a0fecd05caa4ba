"""Shared plain-text pieces of every output: a verdict's value, interval, delta and one-line story.

Owns how numbers of a verdict are written for people (units, intervals, baseline deltas, the
rollback command); it does not lay out tables or files.
"""

from __future__ import annotations

from gate.units import UnitKind, format_value
from gate.verdicts.verdict import Evaluation, Verdict

__all__ = [
    "describe",
    "format_delta",
    "format_interval",
    "format_judged",
    "format_margin",
    "format_verdict_value",
    "rollback_line",
]


def _kind(verdict: Verdict) -> UnitKind:
    return UnitKind(verdict.unit)


def format_judged(verdict: Verdict) -> str:
    """What the gate judges: its statistic of its metric ("p99 ttft", "count errors")."""
    return f"{verdict.statistic} {verdict.metric}"


def format_verdict_value(verdict: Verdict) -> str:
    text = format_value(verdict.value, _kind(verdict), of_total=verdict.of_total)
    return f"~{text}" if verdict.estimate and verdict.value is not None else text


def format_interval(verdict: Verdict) -> str:
    if verdict.interval is None:
        return "—"
    low, high = verdict.interval
    # Percentile gates of a histogram carry the exceedance-share interval, not a value interval.
    kind = (
        UnitKind.RATIO if verdict.estimate and verdict.statistic.startswith("p") else _kind(verdict)
    )
    return f"[{format_value(low, kind)}, {format_value(high, kind)}]"


def format_margin(verdict: Verdict) -> str:
    if verdict.margin is None:
        return "—"
    text = format_value(abs(verdict.margin), _kind(verdict), of_total=verdict.of_total)
    return f"{'+' if verdict.margin >= 0 else '-'}{text}"


def format_delta(verdict: Verdict) -> str:
    if verdict.baseline_delta_ratio is None:
        return "—"
    return f"{verdict.baseline_delta_ratio * 100:+.1f}%"


def rollback_line(verdict: Verdict, evaluation: Evaluation) -> str | None:
    if verdict.rollback is None:
        return None
    target = evaluation.rollback_target or "URL"
    return f"batchgate rollback --target {target} --to {verdict.rollback}"


def describe(verdict: Verdict, evaluation: Evaluation) -> str:
    """One line: value, threshold, n, interval, baseline delta, reason, knob and rollback."""
    parts = [f"{verdict.statistic} {verdict.metric} = {format_verdict_value(verdict)}"]
    if verdict.threshold:
        parts.append(f"threshold {verdict.threshold}")
    parts.append(f"n={verdict.n}")
    if verdict.interval is not None:
        parts.append(f"{verdict.confidence:.0%} interval {format_interval(verdict)}")
    if verdict.baseline_value is not None:
        parts.append(f"baseline delta {format_delta(verdict)}")
    if verdict.reason:
        parts.append(verdict.reason)
    if verdict.knob:
        parts.append(f"knob: {verdict.knob}")
    line = rollback_line(verdict, evaluation)
    if line and verdict.status.value in ("fail", "warn"):
        parts.append(f"rollback: {line}")
    return "; ".join(parts)
