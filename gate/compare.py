"""Comparing two runs: key metrics per profile and verdicts side by side, deltas and their noise.

Owns which metrics a comparison shows, their two-sided intervals (order-statistic bounds for
percentiles, Clopper–Pearson for error rates, a Poisson count interval for request throughput)
and the rule that a difference is "larger than its noise" when the two runs' intervals do not
overlap; metrics without a noise model (peaks, recompute ratio, tokens/s) show the delta only.
Values come from `gate.metrics.derive` and `gate.verdicts.assess.point_value`. It returns data (and
a rich renderable of it); it does not read files or print.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gate import glossary
from gate.gates.spec import Scope, Settings, Slos
from gate.metrics import derive, measurements
from gate.rundir.consistency import run_mismatches
from gate.rundir.run import RunData
from gate.stats import proportion_bounds, quantile_bounds, two_sided
from gate.units import UnitKind, format_value
from gate.verdicts.assess import point_value
from gate.verdicts.verdict import Evaluation

__all__ = ["KEY_METRICS", "Comparison", "Estimate", "MetricRow", "VerdictRow", "compare", "render"]

# (label, metric, statistic); the glossary gives unit and direction.
KEY_METRICS = (
    ("TTFT p50", "ttft", "p50"),
    ("TTFT p99", "ttft", "p99"),
    ("E2E p50", "e2e", "p50"),
    ("E2E p99", "e2e", "p99"),
    ("ITL p50", "itl", "p50"),
    ("ITL p99", "itl", "p99"),
    ("throughput (ok req/s)", "requests", "rate"),
    ("output tokens/s", "output_tokens", "rate"),
    ("error rate", "errors", "mean"),
    ("recompute ratio", "recompute_ratio", "final"),
    ("memory peak", "memory_used", "peak"),
    ("KV usage peak", "kv_usage", "peak"),
)
WITHIN, LARGER, NO_MODEL = "within noise", "larger than noise", "no noise model"
TOO_FEW, UNKNOWN = "too few samples", "—"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    value: float | None
    low: float | None = None  # two-sided interval; None: no noise model or too few samples
    high: float | None = None
    n: int = 0
    reason: str | None = None  # why there is no value

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": _finite(self.value),
            "interval": None if self.low is None else [_finite(self.low), _finite(self.high)],
            "n": self.n,
            "reason": self.reason,
        }


@dataclass(frozen=True, kw_only=True)
class MetricRow:
    profile: str
    label: str
    metric: str
    statistic: str
    unit: UnitKind
    higher_is_better: bool
    a: Estimate
    b: Estimate
    noise: str  # WITHIN | LARGER | NO_MODEL | UNKNOWN
    method: str

    @property
    def delta(self) -> float | None:
        if self.a.value is None or self.b.value is None:
            return None
        return self.b.value - self.a.value

    @property
    def delta_ratio(self) -> float | None:
        delta = self.delta
        if delta is None or not self.a.value:
            return None
        return delta / abs(self.a.value)

    @property
    def worse(self) -> bool | None:
        """Whether B is worse than A (None: no change or unknown)."""
        if not self.delta:
            return None
        return (self.delta < 0) if self.higher_is_better else (self.delta > 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile, "metric": self.metric, "statistic": self.statistic,
            "label": self.label, "unit": self.unit.value, "a": self.a.to_dict(),
            "b": self.b.to_dict(), "delta": _finite(self.delta),
            "delta_ratio": _finite(self.delta_ratio), "noise": self.noise,
            "method": self.method, "b_worse": self.worse if self.noise == LARGER else None,
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class VerdictRow:
    id: str
    a_status: str | None  # None: the gate is not in that run's verdicts
    b_status: str | None
    a_value: float | None
    b_value: float | None
    unit: UnitKind

    @property
    def changed(self) -> bool:
        return self.a_status != self.b_status

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "a": self.a_status, "b": self.b_status,
            "a_value": _finite(self.a_value), "b_value": _finite(self.b_value),
            "unit": self.unit.value, "changed": self.changed,
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Comparison:
    run_a: str
    run_b: str
    confidence: float
    profiles: tuple[str, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    metrics: tuple[MetricRow, ...]
    verdicts: tuple[VerdictRow, ...]
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_a": self.run_a, "run_b": self.run_b, "confidence": self.confidence,
            "profiles": list(self.profiles), "only_in_a": list(self.only_a),
            "only_in_b": list(self.only_b), "metrics": [m.to_dict() for m in self.metrics],
            "verdicts": [v.to_dict() for v in self.verdicts], "notes": list(self.notes),
        }  # fmt: skip


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _bound(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _estimate(
    measurement: measurements.Measurement,
    statistic: str,
    level: float,
    *,
    metric_counts_requests: bool,
) -> tuple[Estimate, str]:
    """The point value, its interval (one-sided bounds at `level` each) and the method used."""
    if isinstance(measurement, measurements.NoData):
        return Estimate(value=None, reason=measurement.reason), UNKNOWN
    value = point_value(measurement, statistic)
    if isinstance(measurement, measurements.Samples) and statistic in glossary.PERCENTILES:
        n = len(measurement.values)
        if n == 0:
            return Estimate(value=None, reason="no samples"), UNKNOWN
        bounds = quantile_bounds(
            measurement.values, glossary.PERCENTILES[statistic], confidence=level
        )
        method = "order-statistic interval" + (
            " (histogram estimate)" if measurement.estimate else ""
        )
        return Estimate(
            value=value, low=_bound(bounds.lower), high=_bound(bounds.upper), n=n
        ), method
    if isinstance(measurement, measurements.Events) and statistic == "mean" and measurement.total:
        bounds = proportion_bounds(measurement.hits, measurement.total, confidence=level)
        est = Estimate(value=value, low=bounds.lower, high=bounds.upper, n=measurement.total)
        return est, "Clopper–Pearson"
    if (
        isinstance(measurement, measurements.Events)
        and statistic == "rate"
        and metric_counts_requests
        and measurement.window_seconds > 0
        and value is not None
    ):
        hits, seconds = measurement.hits, measurement.window_seconds
        z = statistics.NormalDist().inv_cdf(level)
        half = z * math.sqrt(max(hits, 1))
        low, high = max(hits - half, 0.0) / seconds, (hits + half) / seconds
        return Estimate(value=value, low=low, high=high, n=hits), "Poisson count (normal approx.)"
    n = len(measurement.values) if isinstance(measurement, measurements.Series) else 0
    if value is None:
        return Estimate(value=None, n=n, reason="no value in the window"), UNKNOWN
    return Estimate(value=value, n=n), NO_MODEL


def _noise(a: Estimate, b: Estimate, method: str) -> str:
    if a.value is None or b.value is None:
        return UNKNOWN
    if method == NO_MODEL:
        return NO_MODEL
    if None in (a.low, a.high, b.low, b.high):
        return TOO_FEW  # an order-statistic interval needs enough samples on both sides
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    return LARGER if a.high < b.low or b.high < a.low else WITHIN


_SETTINGS = Settings()
_SLOS = Slos()


def _metric_rows(run_a: RunData, run_b: RunData, profile: str, level: float) -> list[MetricRow]:
    rows = []
    for label, metric, statistic in KEY_METRICS:
        entry = glossary.get_metric(metric)
        estimates = []
        for run in (run_a, run_b):
            measurement = derive.measure(
                run.profiles[profile], metric, statistic, Scope(),
                slos=_SLOS, settings=_SETTINGS, warmup_seconds=None,
            )  # fmt: skip
            # Requests arrive one by one (Poisson-like); tokens come in bursts of a request's
            # length, so a count interval would understate their noise: no model for tokens/s.
            estimates.append(
                _estimate(
                    measurement, statistic, level, metric_counts_requests=metric == "requests"
                )
            )
        (a, method_a), (b, method_b) = estimates
        method = method_a if method_a != UNKNOWN else method_b
        rows.append(
            MetricRow(
                profile=profile,
                label=label,
                metric=metric,
                statistic=statistic,
                unit=glossary.statistic_unit(entry, statistic),
                higher_is_better=entry.higher_is_better,
                a=a,
                b=b,
                noise=_noise(a, b, method),
                method=method,
            )
        )
    return rows


def _verdict_rows(a: Evaluation | None, b: Evaluation | None) -> list[VerdictRow]:
    by_a = {v.id: v for v in (a.verdicts if a else [])}
    by_b = {v.id: v for v in (b.verdicts if b else [])}
    rows = []
    for key in [*by_a, *(k for k in by_b if k not in by_a)]:
        va, vb = by_a.get(key), by_b.get(key)
        some = va or vb
        assert some is not None
        rows.append(
            VerdictRow(
                id=key,
                a_status=va.status.value if va else None,
                b_status=vb.status.value if vb else None,
                a_value=va.value if va else None,
                b_value=vb.value if vb else None,
                unit=UnitKind(some.unit),
            )
        )
    return rows


def compare(
    run_a: RunData,
    run_b: RunData,
    *,
    verdicts_a: Evaluation | None = None,
    verdicts_b: Evaluation | None = None,
    confidence: float = 0.95,
) -> Comparison:
    """Key metrics of every profile both runs have, and their verdicts (pure)."""
    level = two_sided(confidence)
    common = tuple(p for p in run_a.profiles if p in run_b.profiles)
    notes = []
    if verdicts_a is None or verdicts_b is None:
        missing = [name for name, v in (("A", verdicts_a), ("B", verdicts_b)) if v is None]
        notes.append(f"no verdicts for run {' and '.join(missing)}: verdicts not compared")
    for label, run in (("A", run_a), ("B", run_b)):
        notes.extend(
            f"run {label} is damaged ({mismatch}): its metrics are of what is left"
            for mismatch in run_mismatches(run)
        )
    return Comparison(
        run_a=run_a.path,
        run_b=run_b.path,
        confidence=confidence,
        profiles=common,
        only_a=tuple(p for p in run_a.profiles if p not in run_b.profiles),
        only_b=tuple(p for p in run_b.profiles if p not in run_a.profiles),
        metrics=tuple(row for p in common for row in _metric_rows(run_a, run_b, p, level)),
        verdicts=tuple(_verdict_rows(verdicts_a, verdicts_b)),
        notes=tuple(notes),
    )


def _cell(estimate: Estimate, unit: UnitKind) -> str:
    if estimate.value is None:
        return "—"
    return format_value(estimate.value, unit)


def _delta_text(row: MetricRow) -> Text:
    if row.delta is None:
        return Text("—")
    sign = "+" if row.delta >= 0 else "-"
    if row.unit is UnitKind.RATIO:  # a change of a share reads as percentage points
        text = f"{sign}{abs(row.delta) * 100:.3g} pp"
    else:
        text = f"{sign}{format_value(abs(row.delta), row.unit)}"
    if row.delta_ratio is not None:
        text += f" ({row.delta_ratio * 100:+.1f}%)"
    style = ""
    if row.noise == LARGER:
        style = "bold red" if row.worse else "bold green"
    return Text(text, style=style)


def render(comparison: Comparison) -> RenderableType:
    """Rich tables: per profile A | B | delta | noise, then the verdicts of both runs."""
    parts: list[RenderableType] = [
        Text(f"A: {comparison.run_a}\nB: {comparison.run_b}", style="bold"),
    ]
    for profile in comparison.profiles:
        table = Table(title=f"profile {profile}", title_justify="left")
        for header, justify in (("metric", "left"), ("A", "right"), ("B", "right"),
                                ("Δ (B − A)", "right"), ("noise", "left")):  # fmt: skip
            table.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row in (r for r in comparison.metrics if r.profile == profile):
            mark = "◆ " if row.noise == LARGER else ""
            table.add_row(
                row.label, _cell(row.a, row.unit), _cell(row.b, row.unit), _delta_text(row),
                Text(mark + row.noise, style="bold" if mark else "dim"),
            )  # fmt: skip
        parts.append(table)
    if comparison.verdicts:
        table = Table(title="verdicts", title_justify="left")
        for header in ("gate", "A", "B", "value A", "value B"):
            table.add_column(header)
        for verdict in comparison.verdicts:
            style = "bold" if verdict.changed else ""
            table.add_row(
                Text(("◆ " if verdict.changed else "") + verdict.id, style=style),
                verdict.a_status or "absent", verdict.b_status or "absent",
                format_value(verdict.a_value, verdict.unit),
                format_value(verdict.b_value, verdict.unit),
            )  # fmt: skip
        parts.append(table)
    for name, only in (("A", comparison.only_a), ("B", comparison.only_b)):
        if only:
            parts.append(Text(f"only in run {name}: {', '.join(only)}", style="yellow"))
    for note in comparison.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    parts.append(
        Text(
            f"◆ marks a metric whose difference is larger than its noise (the runs' "
            f"{comparison.confidence:.0%} intervals do not overlap) and a gate whose verdict "
            "changed between the runs (see docs/report.md)",
            style="dim",
        )
    )
    return Group(*parts)
