"""What judging a run needs at hand, and the Verdict one judgement becomes.

Owns the per-evaluation context of the judge (the run, the gates file's settings, the baseline
seen only through `value(key)` and `mismatches(provenance, fields)`, whether the files are still
growing, the run's fail-closed reasons per profile, and the last measurement, so neighbouring
gates on one scope measure once), the key a baseline stores a statistic under, and turning an
assessment into a Verdict with its margin. It does not decide outcomes (`gate.verdicts.assess`,
`gate.verdicts.judge`).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Protocol

from gate import glossary
from gate.gates.spec import Gate, GatesFile, Scope
from gate.metrics import derive
from gate.metrics.measurements import Measurement
from gate.rundir.consistency import load_problem, record_mismatch, run_damage
from gate.rundir.run import ProfileData, RunData
from gate.units import Threshold
from gate.verdicts.assess import Assessment
from gate.verdicts.verdict import Status, Verdict

__all__ = ["BaselineLike", "JudgeContext", "make_verdict", "measure_key"]


class BaselineLike(Protocol):
    @property
    def name(self) -> str: ...

    def value(self, key: str) -> float | None: ...

    def mismatches(
        self, run_provenance: dict[str, str | None], fields: tuple[str, ...]
    ) -> list[str]: ...


def measure_key(profile: str, metric: str, statistic: str, scope: Scope) -> str:
    """The name a baseline stores a measured statistic under."""
    scope_items = {k: v for k, v in scope.to_dict().items() if k != "profile"}
    return f"{profile}|{metric}|{statistic}|{json.dumps(scope_items, sort_keys=True)}"


class JudgeContext:
    def __init__(
        self, run: RunData, gates_file: GatesFile, baseline: BaselineLike | None, partial: bool
    ) -> None:
        self.run, self.gates_file, self.baseline, self.partial = run, gates_file, baseline, partial
        self.settings = gates_file.settings
        self.last_key: tuple[Any, ...] | None = None
        self.last: Measurement | None = None
        # Arrays gates on one profile share (windows, scope masks, formulas over all requests:
        # `gate.metrics.client`), for this evaluation only.
        self.memo: dict[Any, Any] = {}
        manifest = run.manifest or {}
        ended = manifest.get("ended")
        # An abort_on_fail stop is a judged outcome, not a fault: the profiles before it
        # completed, the aborted one is judged by its abort record.
        self.run_closed = (
            None
            if partial or ended in (None, "completed", "aborted")
            else (f"run ended {ended!r}: {manifest.get('reason') or 'no reason recorded'}")
        )
        if not partial and self.run_closed is None:
            self.run_closed = run_damage(run)
        self.run_aborted = not partial and ended == "aborted"

    def fork(self) -> JudgeContext:
        """A context for another thread of the same evaluation: the same run, settings and
        shared arrays (`memo`; two threads that miss one key both compute the same array, and
        either copy is right), but its own last measurement."""
        other = copy.copy(self)
        other.last_key, other.last = None, None
        return other

    def closed_reason(self, profile: ProfileData | None, name: str) -> str | None:
        if self.run_closed:
            return self.run_closed
        if profile is None:
            if self.run_aborted:
                return f"profile {name!r} was not run: an abort_on_fail gate stopped the run"
            return f"profile {name!r} is not in this run"
        if self.partial:
            return None
        if profile.abort is not None:
            return (
                f"profile stopped early by abort_on_fail gate {profile.abort.gate!r} after "
                f"{profile.abort.elapsed_seconds:.1f} s"
            )
        load = profile.load
        if load is None:
            return "load.json missing: the measurement's validity is unknown"
        for field in ("ended", "measurement_valid"):
            if field not in load:  # the load generator always writes both
                return f"load.json has no {field!r}: the measurement's validity is unknown"
        if load.get("ended") != "completed":
            return f"load ended {load.get('ended')!r}"
        if load.get("measurement_valid") is not True:
            reasons = "; ".join(load.get("invalid_reasons") or []) or "no reason given"
            return f"measurement invalid: {reasons}"
        # Records that do not add up to what load.json says was sent are never judged: a gate
        # would pass on the survivors. Then any other key a judgement needs.
        return record_mismatch(profile) or load_problem(load)

    def measure(self, gate: Gate, profile: ProfileData, scope: Scope) -> Measurement:
        warmup = (
            gate.warmup_seconds if gate.warmup_seconds is not None else self.settings.warmup_seconds
        )
        slos = gate.slos or self.gates_file.slos
        # Sample metrics do not depend on the statistic: gates side by side on one scope (p50
        # and p99 of 32M ITL gaps) share one measurement. One entry only, dropped before the
        # next is derived, so no more than one set of samples is alive at a time.
        key = None
        if glossary.get_metric(gate.metric).shape is glossary.Shape.SAMPLES:
            key = (profile.name, gate.metric, scope, warmup, slos)
            if self.last_key == key and self.last is not None:
                return self.last
        self.last_key, self.last = None, None
        measurement = derive.measure(
            profile,
            gate.metric,
            gate.statistic,
            scope,
            slos=slos,
            settings=self.settings,
            warmup_seconds=warmup,
            memo=self.memo,
        )
        if key is not None:
            self.last_key, self.last = key, measurement
        return measurement


def make_verdict(
    gate: Gate,
    profile: str | None,
    status: Status,
    assessment: Assessment,
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
