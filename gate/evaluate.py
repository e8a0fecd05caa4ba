"""The gate evaluator: run data + gates -> verdicts, as a pure function (plus an incremental
form for `abort_on_fail`).

Owns the judgement rules: percentile gates are judged on exceedance counts with exact one-sided
binomial bounds (pass when the upper bound of P(bad) is under the allowed share, fail when the
lower bound is over it, inconclusive otherwise); means and shares on their interval; peaks,
counts and finals as points; warn/fail levels; ratio-between-scopes and baseline-regression
gates; and fail-closed handling (no data, empty scope, dead target, invalid measurement never
pass). It does not read files (`gate.rundir`) or render (`gate.outputs`), and knows a baseline
only through `value(key)` and `mismatches(provenance, fields)`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gate import derive, glossary
from gate.derive import Events, Histogram, NoData, Samples, Scalar, Series
from gate.exit_codes import ExitCode
from gate.gates_file import Gate, GatesFile, Scope
from gate.rundir import ProfileData, RunData, provenance
from gate.stats import Bounds, mean_bounds, proportion_bounds, quantile_with_bounds, two_sided
from gate.units import Threshold, UnitKind
from gate.verdicts import Evaluation, Status, Verdict

__all__ = [
    "Evaluation",
    "IncrementalEvaluator",
    "assess",
    "evaluate",
    "exit_code_for",
    "measure_key",
    "point_value",
]

_MONOTONE = ("max", "peak", "count", "delta")


class BaselineLike(Protocol):
    @property
    def name(self) -> str: ...

    def value(self, key: str) -> float | None: ...

    def mismatches(
        self, run_provenance: dict[str, str | None], fields: tuple[str, ...]
    ) -> list[str]: ...


@dataclass(frozen=True, kw_only=True)
class _Assessment:
    outcome: str  # pass | fail | inconclusive | no_data
    value: float | None = None
    n: int = 0
    interval: tuple[float, float] | None = None
    estimate: bool = False
    reason: str = ""


def measure_key(profile: str, metric: str, statistic: str, scope: Scope) -> str:
    """The name a baseline stores a measured statistic under."""
    scope_items = {k: v for k, v in scope.to_dict().items() if k != "profile"}
    return f"{profile}|{metric}|{statistic}|{json.dumps(scope_items, sort_keys=True)}"


def point_value(measurement: derive.Measurement, statistic: str) -> float | None:
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


def _bounds_judgement(threshold: Threshold, bounds: Bounds) -> str:
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


def _point(value: float | None, threshold: Threshold, n: int, **extra: Any) -> _Assessment:
    if value is None or math.isnan(value):
        return _Assessment(outcome="no_data", reason="no value in this scope", n=n)
    return _Assessment(
        outcome="pass" if threshold.holds(value) else "fail", value=value, n=n, **extra
    )


def assess(
    measurement: derive.Measurement, statistic: str, threshold: Threshold, confidence: float
) -> _Assessment:
    """Judge one measurement's statistic against one threshold level (pure)."""
    if isinstance(measurement, NoData):
        return _Assessment(outcome="no_data", reason=measurement.reason)
    if isinstance(measurement, Samples):
        values, n = measurement.values, len(measurement.values)
        if n == 0:
            return _Assessment(outcome="no_data", reason="empty scope: no samples")
        if statistic == "max":
            return _point(float(np.max(values)), threshold, n, estimate=measurement.estimate)
        if statistic == "mean":
            bounds = mean_bounds(values, confidence=confidence)
            shown = mean_bounds(values, confidence=two_sided(confidence))
            return _Assessment(
                outcome=_bounds_judgement(threshold, bounds),
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
        return _Assessment(
            outcome=outcome, value=value, n=n, interval=(qb.lower, qb.upper), reason=reason
        )
    if isinstance(measurement, Histogram):
        return _assess_histogram(measurement, statistic, threshold, confidence)
    if isinstance(measurement, Events):
        if statistic in ("count", "delta", "rate"):
            if statistic == "rate" and measurement.window_seconds <= 0:
                return _Assessment(outcome="no_data", reason="the scope covers no time")
            return _point(point_value(measurement, statistic), threshold, measurement.total)
        if measurement.total == 0:
            return _Assessment(outcome="no_data", reason="empty scope: no requests")
        value = measurement.hits / measurement.total
        if threshold.op == "==":
            return _point(value, threshold, measurement.total)
        bounds = proportion_bounds(measurement.hits, measurement.total, confidence=confidence)
        shown = proportion_bounds(
            measurement.hits, measurement.total, confidence=two_sided(confidence)
        )
        return _Assessment(
            outcome=_bounds_judgement(threshold, bounds),
            value=value,
            n=measurement.total,
            interval=(shown.lower, shown.upper),
            reason=f"{measurement.hits} of {measurement.total} requests",
        )
    if isinstance(measurement, Series):
        values = measurement.values
        if threshold.of_total:
            if measurement.totals is None or np.all(np.isnan(measurement.totals)):
                return _Assessment(
                    outcome="no_data", reason="no device total to take a % of (CPU fallback?)"
                )
            values = values / measurement.totals
        if len(values) == 0:
            return _Assessment(outcome="no_data", reason="no samples in this window")
        return _point(
            point_value(Series(values=values), statistic),
            threshold,
            len(values),
            reason=measurement.note or "",
        )
    assert isinstance(measurement, Scalar)
    if measurement.lower_bound and threshold.is_upper_limit and threshold.holds(measurement.value):
        return _Assessment(
            outcome="inconclusive",
            value=measurement.value,
            n=measurement.n,
            reason=f"at least {measurement.value:.4g}: {measurement.note}",
        )
    return _point(measurement.value, threshold, measurement.n, reason=measurement.note or "")


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
) -> _Assessment:
    n = hist.count
    if n == 0:
        return _Assessment(
            outcome="no_data", reason="the histogram saw no observations in the window"
        )
    if statistic == "max":
        return _Assessment(
            outcome="no_data", reason="a max needs exact step records, not a histogram"
        )
    if statistic == "mean":
        return _point(hist.total_sum / n, threshold, n, estimate=True, reason="histogram estimate")
    q = glossary.PERCENTILES[statistic]
    value = _histogram_quantile(hist, q)
    matches = np.nonzero(np.isclose(hist.bounds, threshold.value, rtol=1e-9, atol=1e-12))[0]
    if len(matches) == 0 or threshold.op == "==":
        return _Assessment(
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
    return _Assessment(
        outcome=outcome,
        value=value,
        n=n,
        estimate=True,
        interval=(share.lower, share.upper),
        reason=f"histogram estimate: {bad} of {n} beyond the bucket bound",
    )


def _combine(fail: _Assessment | None, warn: _Assessment | None) -> tuple[Status, _Assessment]:
    if fail is not None:
        if fail.outcome != "pass" or warn is None:
            return Status(fail.outcome), fail
        return (Status.WARN if warn.outcome == "fail" else Status.PASS), fail
    assert warn is not None
    # A warn-only gate cannot fail the run: anything short of a confident pass is a warning.
    if warn.outcome == "no_data":
        return Status.NO_DATA, warn
    return (Status.PASS if warn.outcome == "pass" else Status.WARN), warn


class _Context:
    def __init__(
        self, run: RunData, gates_file: GatesFile, baseline: BaselineLike | None, partial: bool
    ) -> None:
        self.run, self.gates_file, self.baseline, self.partial = run, gates_file, baseline, partial
        self.settings = gates_file.settings
        manifest = run.manifest or {}
        ended = manifest.get("ended")
        self.run_closed = (
            None
            if partial or ended in (None, "completed")
            else (f"run ended {ended!r}: {manifest.get('reason') or 'no reason recorded'}")
        )

    def closed_reason(self, profile: ProfileData | None, name: str) -> str | None:
        if self.run_closed:
            return self.run_closed
        if profile is None:
            return f"profile {name!r} is not in this run"
        if self.partial:
            return None
        load = profile.load
        if load is None:
            return "load.json missing: the measurement's validity is unknown"
        if load.get("ended", "completed") != "completed":
            return f"load ended {load.get('ended')!r}"
        if load.get("measurement_valid") is False:
            reasons = "; ".join(load.get("invalid_reasons") or []) or "no reason given"
            return f"measurement invalid: {reasons}"
        return None

    def measure(self, gate: Gate, profile: ProfileData, scope: Scope) -> derive.Measurement:
        warmup = (
            gate.warmup_seconds if gate.warmup_seconds is not None else self.settings.warmup_seconds
        )
        return derive.measure(
            profile,
            gate.metric,
            gate.statistic,
            scope,
            slos=gate.slos or self.gates_file.slos,
            settings=self.settings,
            warmup_seconds=warmup,
        )


def _verdict(
    gate: Gate,
    profile: str | None,
    status: Status,
    assessment: _Assessment,
    threshold: Threshold | None,
    confidence: float,
    **extra: Any,
) -> Verdict:
    margin = None
    if threshold is not None and assessment.value is not None and threshold.op != "==":
        margin = (
            threshold.value - assessment.value
            if threshold.is_upper_limit
            else assessment.value - threshold.value
        )
    unit = gate.unit.value
    return Verdict(
        gate=gate.name,
        profile=profile,
        status=status,
        metric=gate.metric,
        statistic=gate.statistic,
        unit=unit,
        scope=gate.scope.to_dict(),
        value=assessment.value,
        n=assessment.n,
        interval=assessment.interval,
        threshold=None if threshold is None else threshold.text,
        threshold_value=None if threshold is None else threshold.value,
        margin=margin,
        confidence=confidence,
        reason=assessment.reason,
        estimate=assessment.estimate,
        of_total=bool(threshold and threshold.of_total),
        monitor=gate.monitor,
        key=gate.key,
        knob=gate.knob,
        rollback=gate.rollback,
        **extra,
    )


def _judge(ctx: _Context, gate: Gate, name: str) -> Verdict:
    profile = ctx.run.profiles.get(name)
    confidence = ctx.settings.confidence
    closed = ctx.closed_reason(profile, name)
    if closed is not None or profile is None:
        return _verdict(
            gate,
            name,
            Status.NO_DATA,
            _Assessment(outcome="no_data", reason=closed or ""),
            gate.fail or gate.warn,
            confidence,
        )
    if gate.relative_to is not None:
        return _judge_ratio(ctx, gate, profile)
    if gate.regression is not None:
        return _judge_regression(ctx, gate, profile)
    measurement = ctx.measure(gate, profile, gate.scope)
    if gate.fail is None and gate.warn is None:  # a monitor without thresholds: report the value
        value = point_value(measurement, gate.statistic)
        reason = measurement.reason if isinstance(measurement, NoData) else "monitor"
        status = Status.NO_DATA if value is None else Status.PASS
        n = len(measurement.values) if isinstance(measurement, (Samples, Series)) else 0
        return _verdict(
            gate,
            name,
            status,
            _Assessment(outcome=status.value, value=value, n=n, reason=reason),
            None,
            confidence,
        )
    fail = assess(measurement, gate.statistic, gate.fail, confidence) if gate.fail else None
    warn = assess(measurement, gate.statistic, gate.warn, confidence) if gate.warn else None
    status, shown = _combine(fail, warn)
    return _verdict(gate, name, status, shown, gate.fail or gate.warn, confidence)


def _stat_bounds(values: np.ndarray, statistic: str, confidence: float) -> tuple[float, Bounds]:
    if statistic == "mean":
        return float(np.mean(values)), mean_bounds(values, confidence=confidence)
    return quantile_with_bounds(values, glossary.PERCENTILES[statistic], confidence=confidence)


def _judge_ratio(ctx: _Context, gate: Gate, profile: ProfileData) -> Verdict:
    confidence = ctx.settings.confidence
    threshold = gate.fail or gate.warn
    assert threshold is not None and gate.relative_to is not None
    numerator = ctx.measure(gate, profile, gate.scope)
    # relative_to may name another profile (e.g. the same class without background load).
    ref_names = gate.relative_to.profile
    ref_name = profile.name if not ref_names or profile.name in ref_names else ref_names[0]
    ref_profile = ctx.run.profiles.get(ref_name)
    closed = ctx.closed_reason(ref_profile, ref_name) if ref_name != profile.name else None
    if ref_profile is None or closed is not None:
        return _verdict(
            gate,
            profile.name,
            Status.NO_DATA,
            _Assessment(outcome="no_data", reason=f"reference profile: {closed}"),
            threshold,
            confidence,
        )
    reference = ctx.measure(gate, ref_profile, gate.relative_to)
    for part, label in ((numerator, "gate scope"), (reference, "reference scope")):
        if isinstance(part, NoData) or not isinstance(part, Samples) or len(part.values) == 0:
            reason = part.reason if isinstance(part, NoData) else "no samples"
            return _verdict(
                gate,
                profile.name,
                Status.NO_DATA,
                _Assessment(outcome="no_data", reason=f"{label}: {reason}"),
                threshold,
                confidence,
            )
    assert isinstance(numerator, Samples) and isinstance(reference, Samples)
    # Both bounds must hold at once: split the error probability between them (Bonferroni).
    each = 1.0 - (1.0 - confidence) / 2.0
    num_value, num_bounds = _stat_bounds(numerator.values, gate.statistic, each)
    ref_value, ref_bounds = _stat_bounds(reference.values, gate.statistic, each)
    value = num_value / ref_value if ref_value > 0 else math.inf
    lower = (
        num_bounds.lower / ref_bounds.upper
        if ref_bounds.upper > 0 and num_bounds.lower > 0
        else 0.0
    )
    upper = num_bounds.upper / ref_bounds.lower if ref_bounds.lower > 0 else math.inf
    bounds = Bounds(lower=lower, upper=upper, confidence=confidence)
    assessments = {}
    for level in ("fail", "warn"):
        level_threshold = getattr(gate, level)
        if level_threshold is not None:
            assessments[level] = _Assessment(
                outcome=_bounds_judgement(level_threshold, bounds),
                value=value,
                n=len(numerator.values),
                interval=(lower, upper),
                reason=(
                    f"{gate.statistic} {num_value:.4g} vs reference {ref_value:.4g} "
                    f"(n={len(reference.values)})"
                ),
            )
    status, shown = _combine(assessments.get("fail"), assessments.get("warn"))
    return _verdict(
        gate, profile.name, status, shown, threshold, confidence, reference_value=ref_value
    )


def _judge_regression(ctx: _Context, gate: Gate, profile: ProfileData) -> Verdict:
    confidence = ctx.settings.confidence
    regression = gate.regression
    assert regression is not None

    def inconclusive(reason: str) -> Verdict:
        return _verdict(
            gate,
            profile.name,
            Status.INCONCLUSIVE,
            _Assessment(outcome="inconclusive", reason=reason),
            None,
            confidence,
        )

    if ctx.baseline is None:
        return inconclusive("no baseline given (batchgate check --baseline NAME)")
    mismatches = ctx.baseline.mismatches(
        provenance(ctx.run, profile.name), ctx.settings.baseline_match
    )
    if mismatches:
        return inconclusive(
            f"baseline {ctx.baseline.name!r} is not comparable: {'; '.join(mismatches)}"
        )
    key = measure_key(profile.name, gate.metric, gate.statistic, gate.scope)
    base = ctx.baseline.value(key)
    if base is None:
        return inconclusive(f"baseline {ctx.baseline.name!r} has no value for {key}")
    unit = gate.unit
    increase = regression.max_increase_ratio is not None
    ratio = regression.max_increase_ratio if increase else regression.max_decrease_ratio
    assert ratio is not None

    def limit(r: float) -> Threshold:
        allowed = max(abs(base) * r, regression.floor)
        bound = base + allowed if increase else base - allowed
        return Threshold(
            op="<=" if increase else ">=",
            value=bound,
            kind=unit,
            text=f"{'<=' if increase else '>='} {_fmt(bound, unit)}",
        )

    measurement = ctx.measure(gate, profile, gate.scope)
    fail_threshold = limit(ratio)
    fail = assess(measurement, gate.statistic, fail_threshold, confidence)
    warn = (
        assess(measurement, gate.statistic, limit(regression.warn_ratio), confidence)
        if regression.warn_ratio is not None
        else None
    )
    status, shown = _combine(fail, warn)
    delta = None if shown.value is None or base == 0 else (shown.value - base) / abs(base)
    return _verdict(
        gate,
        profile.name,
        status,
        shown,
        fail_threshold,
        confidence,
        baseline_value=base,
        baseline_delta_ratio=delta,
    )


def _fmt(value: float, unit: UnitKind) -> str:
    from gate.units import format_value

    return format_value(value, unit)


def _profiles_for(gate: Gate, run: RunData) -> list[str]:
    return list(gate.scope.profile) if gate.scope.profile is not None else list(run.profiles)


def _run_notes(run: RunData) -> tuple[str, ...]:
    notes = list(run.notes)
    for name, profile in run.profiles.items():
        notes.extend(f"{name}: {note}" for note in profile.notes)
    return tuple(notes)


def exit_code_for(verdicts: list[Verdict], *, inconclusive_policy: str) -> ExitCode:
    """DESIGN.md §7: fail (1) beats no data (5) beats inconclusive (3, by policy) beats pass."""
    blocking = [v.status for v in verdicts if v.blocking]
    if Status.FAIL in blocking:
        return ExitCode.FAILED
    if Status.NO_DATA in blocking or not verdicts:
        return ExitCode.NO_DATA
    if Status.INCONCLUSIVE in blocking and inconclusive_policy == "fail":
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASSED


def _verdicts(
    run: RunData,
    gates_file: GatesFile,
    gates: tuple[Gate, ...],
    baseline: BaselineLike | None,
    partial: bool,
) -> list[Verdict]:
    ctx = _Context(run, gates_file, baseline, partial)
    verdicts = []
    for gate in gates:
        names = _profiles_for(gate, run)
        if not names:
            verdicts.append(
                _verdict(
                    gate,
                    None,
                    Status.NO_DATA,
                    _Assessment(outcome="no_data", reason="the run has no profiles"),
                    gate.fail,
                    ctx.settings.confidence,
                )
            )
        verdicts.extend(_judge(ctx, gate, name) for name in names)
    return verdicts


def evaluate(
    run: RunData,
    gates_file: GatesFile,
    *,
    baseline: BaselineLike | None = None,
    inconclusive_policy: str | None = None,
) -> Evaluation:
    """Judge every gate of `gates_file` on `run`; pure (reads nothing, writes nothing)."""
    policy = inconclusive_policy or gates_file.settings.inconclusive
    if policy not in ("pass", "fail"):
        raise ValueError(f"inconclusive policy must be pass or fail, not {policy!r}")
    verdicts = _verdicts(run, gates_file, gates_file.gates, baseline, partial=False)
    notes = _run_notes(run) + (
        () if verdicts else ("the gates file has no gates: nothing was checked",)
    )
    return Evaluation(
        verdicts=verdicts,
        exit_code=exit_code_for(verdicts, inconclusive_policy=policy),
        inconclusive_policy=policy,
        confidence=gates_file.settings.confidence,
        run_path=run.path,
        gates_file=gates_file.path,
        baseline=None if baseline is None else baseline.name,
        notes=notes,
    )


class IncrementalEvaluator:
    """Judges `abort_on_fail` gates on a run still in progress, to stop a doomed run early.

    Only a confident failure aborts: an exceedance share whose lower bound is past the limit, an
    interval wholly on the bad side, or a monotone statistic (max, peak, count, delta) already
    past its threshold — and never before the grace period has passed.
    """

    def __init__(self, gates_file: GatesFile, *, grace_seconds: float | None = None) -> None:
        self.gates_file = gates_file
        self.grace_seconds = (
            gates_file.settings.abort_grace_seconds if grace_seconds is None else grace_seconds
        )
        self.gates = tuple(g for g in gates_file.gates if g.abort_on_fail)

    def check(self, run: RunData, *, elapsed_seconds: float) -> list[Verdict]:
        """The failing abort gates (empty: carry on)."""
        if not self.gates or elapsed_seconds < self.grace_seconds:
            return []
        verdicts = _verdicts(run, self.gates_file, self.gates, None, partial=True)
        return [
            v
            for v in verdicts
            if v.status is Status.FAIL and (v.interval is not None or v.statistic in _MONOTONE)
        ]
