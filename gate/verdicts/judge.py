"""Judging one gate on one profile of a run: fail-closed checks, ratio and regression gates.

Owns turning a gate into a Verdict per profile: which profiles a gate covers, fail-closed
handling (no data, profile missing, dead target, invalid measurement never pass), measuring the
gate's scope through `gate.metrics.derive`, ratio-between-scopes gates (Bonferroni-split bounds)
and baseline-regression gates (limits from the stored value). It knows a baseline only through
`value(key)` and `mismatches(provenance, fields)`; the per-statistic rules are
`gate.verdicts.assess`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gate import glossary
from gate.gates.spec import Gate, GatesFile
from gate.metrics.measurements import Events, NoData, Samples, Series
from gate.metrics.trace_ideal import profile_ideal
from gate.rundir.run import ProfileData, RunData, provenance
from gate.stats import Bounds, mean_bounds, quantile_with_bounds
from gate.units import Threshold, UnitKind
from gate.verdicts.assess import (
    Assessment,
    assess,
    bounds_judgement,
    combine,
    monitor_interval,
    point_value,
)
from gate.verdicts.context import BaselineLike, JudgeContext, make_verdict, measure_key
from gate.verdicts.foreign import warn_only_on_foreign
from gate.verdicts.relative import resolve_ideal, resolve_relative
from gate.verdicts.verdict import Status, Verdict

__all__ = ["ITL_PER_CHUNK_NOTE", "verdicts_for"]

ITL_PER_CHUNK_NOTE = "ITL per chunk (the target did not report per-chunk token counts)"


def _judge_abort(ctx: JudgeContext, gate: Gate, profile: ProfileData) -> Verdict | None:
    """The aborting gate's verdict: judged again on what the deciding check read. None when
    this gates file does not reproduce the abort (the gate is judged like the others then)."""
    abort, view = profile.abort, profile.abort_view
    if abort is None or view is None or not gate.abort_on_fail:
        return None
    if abort.elapsed_seconds < ctx.settings.abort_grace_seconds:
        return None
    snapshot = RunData(
        path=ctx.run.path,
        manifest=None,
        profiles={profile.name: view},
        calibration=ctx.run.calibration,
    )
    # As during the run: no baseline, and the files as they were (partial).
    verdict = _judge(JudgeContext(snapshot, ctx.gates_file, None, True), gate, profile.name)
    if not verdict.confident_failure:
        return None
    reason = f"aborted the run early: confident failure after {verdict.n} samples"
    if verdict.reason:
        reason += f" ({verdict.reason})"
    return dataclasses.replace(verdict, reason=reason)


def _judge(ctx: JudgeContext, gate: Gate, name: str) -> Verdict:
    profile = ctx.run.profiles.get(name)
    confidence = ctx.settings.confidence
    if not ctx.partial and not ctx.run_closed and profile is not None and profile.abort:
        aborted = _judge_abort(ctx, gate, profile) if profile.abort.gate == gate.name else None
        if aborted is not None:
            return aborted
    closed = ctx.closed_reason(profile, name)
    if closed is not None or profile is None:
        return make_verdict(
            gate,
            name,
            Status.NO_DATA,
            Assessment(outcome="no_data", reason=closed or ""),
            gate.fail or gate.warn,
            confidence,
        )
    ideal_note = None
    if any(t is not None and t.reference == "ideal" for t in (gate.fail, gate.warn)):
        ideal = profile_ideal(profile, ctx.run.calibration)
        if ideal.ratio is None:
            return make_verdict(
                gate,
                name,
                Status.NO_DATA,
                Assessment(outcome="no_data", reason=ideal.note),
                gate.fail or gate.warn,
                confidence,
            )
        gate, ideal_note = resolve_ideal(gate, ideal.ratio), ideal.note
    if ideal_note is not None:
        verdict = _judge_thresholds(ctx, gate, name, profile)
        return dataclasses.replace(verdict, notes=(*verdict.notes, ideal_note))
    return _judge_thresholds(ctx, gate, name, profile)


def _judge_thresholds(ctx: JudgeContext, gate: Gate, name: str, profile: ProfileData) -> Verdict:
    confidence = ctx.settings.confidence
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
        if isinstance(measurement, Events):
            n = measurement.total
        interval = monitor_interval(measurement, gate.statistic, confidence)
        return make_verdict(
            gate,
            name,
            status,
            Assessment(outcome=status.value, value=value, n=n, reason=reason, interval=interval),
            None,
            confidence,
        )
    sequential = ctx.partial
    fail = (
        assess(measurement, gate.statistic, gate.fail, confidence, sequential=sequential)
        if gate.fail
        else None
    )
    warn = (
        assess(measurement, gate.statistic, gate.warn, confidence, sequential=sequential)
        if gate.warn
        else None
    )
    status, shown = combine(fail, warn)
    return make_verdict(gate, name, status, shown, gate.fail or gate.warn, confidence)


def _stat_bounds(values: np.ndarray, statistic: str, confidence: float) -> tuple[float, Bounds]:
    if statistic == "mean":
        return float(np.mean(values)), mean_bounds(values, confidence=confidence)
    return quantile_with_bounds(values, glossary.PERCENTILES[statistic], confidence=confidence)


def _judge_ratio(ctx: JudgeContext, gate: Gate, profile: ProfileData) -> Verdict:
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
        return make_verdict(
            gate,
            profile.name,
            Status.NO_DATA,
            Assessment(outcome="no_data", reason=f"reference profile: {closed}"),
            threshold,
            confidence,
        )
    reference = ctx.measure(gate, ref_profile, gate.relative_to)
    for part, label in ((numerator, "gate scope"), (reference, "reference scope")):
        if isinstance(part, NoData) or not isinstance(part, Samples) or len(part.values) == 0:
            reason = part.reason if isinstance(part, NoData) else "no samples"
            return make_verdict(
                gate,
                profile.name,
                Status.NO_DATA,
                Assessment(outcome="no_data", reason=f"{label}: {reason}"),
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
            outcome = (
                ("pass" if level_threshold.holds(value) else "fail")
                if level_threshold.op == "=="  # as for a mean: bounds never confirm equality
                else bounds_judgement(level_threshold, bounds)
            )
            if ctx.partial and outcome == "fail":
                # Two one-shot bounds re-applied at every look are not anytime-valid: a ratio
                # gate never stops a run early; the final evaluation judges it.
                outcome = "inconclusive"
            assessments[level] = Assessment(
                outcome=outcome,
                value=value,
                n=len(numerator.values),
                interval=(lower, upper),
                reason=(
                    f"{gate.statistic} {num_value:.4g} vs reference {ref_value:.4g} "
                    f"(n={len(reference.values)})"
                ),
            )
    status, shown = combine(assessments.get("fail"), assessments.get("warn"))
    return make_verdict(
        gate, profile.name, status, shown, threshold, confidence, reference_value=ref_value
    )


def _judge_regression(ctx: JudgeContext, gate: Gate, profile: ProfileData) -> Verdict:
    confidence = ctx.settings.confidence
    regression = gate.regression
    assert regression is not None

    def inconclusive(reason: str) -> Verdict:
        return make_verdict(
            gate,
            profile.name,
            Status.INCONCLUSIVE,
            Assessment(outcome="inconclusive", reason=reason),
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
    status, shown = combine(fail, warn)
    delta = None if shown.value is None or base == 0 else (shown.value - base) / abs(base)
    return make_verdict(
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


# Gates are judged on up to this many threads. Their heavy parts are numpy over whole columns
# (comparisons, selections, partitions of 32M ITL gaps), which run without the GIL, so two
# gates' selections overlap; each worker keeps at most one set of samples alive (context.py).
_MAX_WORKERS = 4


def verdicts_for(
    run: RunData,
    gates_file: GatesFile,
    gates: tuple[Gate, ...],
    baseline: BaselineLike | None,
    partial: bool,
) -> list[Verdict]:
    """The verdicts of `gates` in their order, each gate's profiles in order."""
    ctx = JudgeContext(run, gates_file, baseline, partial)
    # Neighbouring gates on one metric and scope (p50 and p99 of the same gaps) stay together:
    # one worker measures them once.
    chains: list[list[Gate]] = []
    for gate in gates:
        if chains and (chains[-1][-1].metric, chains[-1][-1].scope) == (gate.metric, gate.scope):
            chains[-1].append(gate)
        else:
            chains.append([gate])

    def judge_chain(chain: list[Gate]) -> list[Verdict]:
        local = ctx.fork()
        return [v for gate in chain for v in _gate_verdicts(local, gate)]

    workers = min(_MAX_WORKERS, os.cpu_count() or 1, len(chains))
    if workers < 2:
        return [v for chain in chains for v in judge_chain(chain)]
    with ThreadPoolExecutor(workers, thread_name_prefix="judge") as pool:
        return [v for part in pool.map(judge_chain, chains) for v in part]


def _gate_verdicts(ctx: JudgeContext, gate: Gate) -> list[Verdict]:
    run = ctx.run
    names = _profiles_for(gate, run)
    if not names:
        return [
            make_verdict(
                gate,
                None,
                Status.NO_DATA,
                Assessment(outcome="no_data", reason="the run has no profiles"),
                gate.fail,
                ctx.settings.confidence,
            )
        ]
    resolved, problem = resolve_relative(gate, run.calibration)
    if problem is not None:
        return [
            make_verdict(
                gate,
                name,
                Status.NO_DATA,
                Assessment(outcome="no_data", reason=problem),
                gate.fail or gate.warn,
                ctx.settings.confidence,
            )
            for name in names
        ]
    resolved, foreign = warn_only_on_foreign(run.manifest, resolved)
    verdicts = [_itl_basis(run, resolved, _judge(ctx, resolved, name)) for name in names]
    if foreign is None:
        return verdicts
    return [dataclasses.replace(v, notes=(*v.notes, foreign)) for v in verdicts]


def _itl_basis(run: RunData, gate: Gate, verdict: Verdict) -> Verdict:
    """An ITL verdict says so when some of its gaps are per chunk, not per token: records
    whose chunks were counted as one token each (`chunk_tokens_source` assumed or mixed)."""
    if gate.metric != "itl":
        return verdict
    reference = gate.relative_to.profile if gate.relative_to is not None else None
    names = {verdict.profile, *(reference or ())}
    for name in names:
        profile = run.profiles.get(name) if name is not None else None
        req = None if profile is None else profile.requests
        if req is None:
            continue
        source = req.chunk_tokens_source
        per_chunk = source.equals("assumed") | source.equals("mixed")
        if bool((per_chunk & (req.itl_counts > 0)).any()):
            return dataclasses.replace(verdict, notes=(*verdict.notes, ITL_PER_CHUNK_NOTE))
    return verdict
