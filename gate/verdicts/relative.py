"""Thresholds relative to the target's calibration (`"< 4x unloaded"`, `"> 0.4x capacity"`)
made absolute.

Owns the lookup of a gate's reference in calibration.json — the unloaded median of the gate's
metric, or its saturation rate (capacity), for its length class (short unless the gate's scope
names one) — and the resolved threshold whose text says both forms ("< 4x unloaded = 72 ms"). A
gate whose reference is missing is not judged: the caller reports it as no data (a relative gate
never passes unreferenced). It does not measure or calibrate (`gate.orchestrator.calibration`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from gate.gates.model import Gate
from gate.units import Threshold, format_value

__all__ = [
    "CAPACITY_METRICS",
    "UNLOADED_METRICS",
    "capacity_reference",
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
    base = names.get(metric)
    if base is None:
        return None, f"metric {metric!r} has no calibrated {what} value"
    value = ((calibration.get(section) or {}).get(length_class) or {}).get(base)
    if section == "unloaded":
        value = (value or {}).get("p50")  # a distribution: its median
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None, f"calibration.json has no {what} {base} for {length_class} requests"
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


def resolve_relative(gate: Gate, calibration: Mapping[str, Any] | None) -> tuple[Gate, str | None]:
    """The gate with absolute thresholds, or (gate, reason it cannot be judged)."""
    relative = [t for t in (gate.fail, gate.warn) if t is not None and t.reference is not None]
    if not relative:
        return gate, None
    classes = gate.scope.length_class or ("short",)
    if len(classes) != 1:
        return gate, "a relative threshold needs one length class in the gate's scope"
    resolved: dict[str, Threshold | None] = {}
    for which in ("fail", "warn"):
        threshold = getattr(gate, which)
        if threshold is None or threshold.reference is None:
            resolved[which] = threshold
            continue
        reference, problem = _LOOKUPS[threshold.reference](calibration, gate.metric, classes[0])
        if reference is None:
            return gate, problem
        resolved[which] = _resolve(threshold, reference)
    return dataclasses.replace(gate, **resolved), None
