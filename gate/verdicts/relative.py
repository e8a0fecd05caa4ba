"""Thresholds relative to the target's calibration (`"< 4x unloaded"`, `"> 0.4x capacity"`)
made absolute.

Owns the lookup of a gate's reference in calibration.json — the unloaded median of the gate's
metric, or its saturation rate (capacity), for its length class (short unless the gate's scope
names one) — and the resolved threshold whose text says both forms ("< 4x unloaded = 72 ms"). A
gate whose reference is missing, malformed (not the shape `calibrate` writes, not a positive
finite number) or measured by a calibration phase that was not a valid measurement
(`client.<phase>.measurement_valid`) is not judged: the caller reports it as no data (a relative
gate never passes on a reference that does not support it). It does not measure or calibrate
(`gate.orchestrator.calibration`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from gate.gates.spec import Gate
from gate.units import Threshold, format_value

__all__ = [
    "CAPACITY_METRICS",
    "PHASE_SECTIONS",
    "UNLOADED_METRICS",
    "capacity_reference",
    "phase_problem",
    "resolve_relative",
    "unloaded_reference",
]

# The calibrated metric a gate's metric is a multiple of (same clock, same definition).
UNLOADED_METRICS = {
    "ttft": "ttft",
    "ttft_from_planned": "ttft",
    "server_ttft": "ttft",
    "e2e": "e2e",
    "e2e_from_planned": "e2e",
    "tpot": "tpot",
    "itl": "itl",
}

# The calibrated saturation rate a gate's rate metric is a fraction of ("> 0.4x capacity"):
# what the target completes with many closed-loop users, for the calibration's short mix.
CAPACITY_METRICS = {
    "batch_job_output_tokens_per_second": "output_tokens_per_second",
    "achieved_rate": "rps",
}


# The calibration phase whose measurement each section comes from (calibration.json `client`).
_PHASES = {"unloaded": "lone", "capacity": "capacity"}
# The calibration.json sections a client phase measured (`kv_capacity` is the server's word).
PHASE_SECTIONS = frozenset(_PHASES)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def phase_problem(calibration: Mapping[str, Any], section: str) -> str | None:
    """Why the phase that measured `section` (`unloaded`, `capacity`) cannot serve as a
    reference (None: it can); profile sizing asks the same (`gate.orchestrator.relative`). A
    saturated client times itself, not the target, so its medians are no reference. A
    calibration that records no validity (hand-written, from before `client` existed) is read as
    it stands; one that records it must say `measurement_valid: true`."""
    client = calibration.get("client")
    if client is None:
        return None
    phase = _PHASES[section]
    if not isinstance(client, Mapping):
        return "calibration.json: 'client' is not an object"
    record = client.get(phase)
    if record is None:
        return None
    if not isinstance(record, Mapping):
        return f"calibration.json: 'client.{phase}' is not an object"
    if record.get("measurement_valid") is not True:
        reasons = record.get("reasons")
        why = "; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons else None
        return (
            f"the calibration's {phase} phase was not a valid measurement"
            f" ({why or 'no reason given'}): its {section} values are no reference"
        )
    return None


def _calibrated(
    calibration: Mapping[str, Any] | None,
    metric: str,
    length_class: str,
    *,
    section: str,
    names: Mapping[str, str],
    what: str,
) -> tuple[float | None, str | None]:
    if calibration is None:
        return None, "the run has no calibration.json (relative thresholds need one)"
    if not isinstance(calibration, Mapping):
        return None, "calibration.json is not an object"
    base = names.get(metric)
    if base is None:
        return None, f"metric {metric!r} has no calibrated {what} value"
    problem = phase_problem(calibration, section)
    if problem is not None:
        return None, problem
    # Walk section -> length class -> metric; a level of the wrong shape (a hand-edited or
    # foreign file) is named, never an AttributeError out of `check`.
    value: Any = calibration
    where: list[str] = []
    for key in (section, length_class, base):
        if value is None:
            break
        if not isinstance(value, Mapping):
            return None, f"calibration.json: {'.'.join(where)} is not an object"
        value = value.get(key)
        where.append(key)
    if value is not None and section == "unloaded":
        # A distribution ({p50, p90, n}): its median, from at least one sample.
        if not isinstance(value, Mapping):
            return None, (
                f"calibration.json: {'.'.join(where)} is {value!r}, expected an object with p50"
            )
        n = value.get("n")
        if n is not None and (not _number(n) or not n >= 1):  # NaN too
            return None, f"calibration.json: {'.'.join(where)}.n is {n!r}, not a sample count"
        value = value.get("p50")
    if value is None:
        return None, f"calibration.json has no {what} {base} for {length_class} requests"
    if not _number(value) or not math.isfinite(value) or value <= 0:
        return None, (
            f"calibration.json: the {what} {base} for {length_class} requests is {value!r},"
            " not a positive number"
        )
    return float(value), None


def unloaded_reference(
    calibration: Mapping[str, Any] | None, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(median seconds, None) or (None, why there is none)."""
    return _calibrated(calibration, metric, length_class, section="unloaded",
                       names=UNLOADED_METRICS, what="unloaded")  # fmt: skip


def capacity_reference(
    calibration: Mapping[str, Any] | None, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(saturation rate in the metric's unit, None) or (None, why there is none)."""
    return _calibrated(calibration, metric, length_class, section="capacity",
                       names=CAPACITY_METRICS, what="capacity")  # fmt: skip


_LOOKUPS = {"unloaded": unloaded_reference, "capacity": capacity_reference}


def _resolve(threshold: Threshold | None, reference: float) -> Threshold | None:
    if threshold is None or threshold.reference is None:
        return threshold
    value = threshold.value * reference
    text = f"{threshold.text} = {format_value(value, threshold.kind)}"
    return dataclasses.replace(threshold.with_value(value, text=text))


def resolve_ideal(gate: Gate, ideal: float) -> Gate:
    """The gate with its "x ideal" thresholds made absolute against `ideal` (a profile's ideal
    prefix-cache hit ratio, `gate.metrics.prefix_ideal`)."""
    resolved = {
        which: _resolve(t, ideal) if t is not None and t.reference == "ideal" else t
        for which, t in (("fail", gate.fail), ("warn", gate.warn))
    }
    return dataclasses.replace(gate, **resolved)


def resolve_relative(gate: Gate, calibration: Mapping[str, Any] | None) -> tuple[Gate, str | None]:
    """The gate with absolute thresholds, or (gate, reason it cannot be judged)."""
    # "x ideal" is the profile's own (its replayed trace window): resolved per profile by the
    # judge (`resolve_ideal`), not from the calibration.
    relative = [
        t
        for t in (gate.fail, gate.warn)
        if t is not None and t.reference is not None and t.reference != "ideal"
    ]
    if not relative:
        return gate, None
    classes = gate.scope.length_class or ("short",)
    if len(classes) != 1:
        return gate, "a relative threshold needs one length class in the gate's scope"
    resolved: dict[str, Threshold | None] = {}
    for which in ("fail", "warn"):
        threshold = getattr(gate, which)
        if threshold is None or threshold.reference in (None, "ideal"):
            resolved[which] = threshold
            continue
        reference, problem = _LOOKUPS[threshold.reference](calibration, gate.metric, classes[0])
        if reference is None:
            return gate, problem
        resolved[which] = _resolve(threshold, reference)
    return dataclasses.replace(gate, **resolved), None
