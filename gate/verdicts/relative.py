"""Thresholds relative to the target's calibration (`fail: "< 4x unloaded"`) made absolute.

Owns the lookup of a gate's reference in calibration.json — the unloaded median of the gate's
metric for its length class (short unless the gate's scope names one) — and the resolved
threshold whose text says both forms ("< 4x unloaded = 72 ms"). A gate whose reference is
missing is not judged: the caller reports it as no data (a relative gate never passes
unreferenced). It does not measure or calibrate (`gate.orchestrator.calibration`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from gate.gates.model import Gate
from gate.units import Threshold, format_value

__all__ = ["UNLOADED_METRICS", "resolve_relative", "unloaded_reference"]

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


def unloaded_reference(
    calibration: Mapping[str, Any] | None, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(median seconds, None) or (None, why there is none)."""
    if calibration is None:
        return None, "the run has no calibration.json (relative thresholds need one)"
    base = UNLOADED_METRICS.get(metric)
    if base is None:
        return None, f"metric {metric!r} has no calibrated unloaded value"
    entry = ((calibration.get("unloaded") or {}).get(length_class) or {}).get(base) or {}
    value = entry.get("p50")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None, f"calibration.json has no unloaded {base} for {length_class} requests"
    return float(value), None


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
    reference, problem = unloaded_reference(calibration, gate.metric, classes[0])
    if reference is None:
        return gate, problem
    return (
        dataclasses.replace(
            gate, fail=_resolve(gate.fail, reference), warn=_resolve(gate.warn, reference)
        ),
        None,
    )
