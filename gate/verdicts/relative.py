"""Thresholds relative to the target's calibration (`"< 4x unloaded"`, `"> 0.4x capacity"`)
made absolute.

Owns which calibrated value a gate's metric is a multiple of — the unloaded median of the same
metric on the same clock, or a saturation rate (capacity) — for its length class (short unless
the gate's scope names one), and the resolved threshold whose text says both forms ("< 4x
unloaded = 72 ms"). A gate whose reference is missing, malformed or measured by a phase that was
not a valid measurement (`gate.calibration.references` says which and why) is not judged: the
caller reports it as no data (a relative gate never passes on a reference that does not support
it). It does not measure or calibrate (`gate.orchestrator.calibration`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from gate.calibration.content import Calibration
from gate.calibration.references import saturated_rate, unloaded_median
from gate.gates.spec import Gate
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

_Lookup = Callable[[Calibration, str, str], tuple[float | None, str | None]]


def _calibrated(
    calibration: Calibration | None,
    metric: str,
    length_class: str,
    *,
    names: Mapping[str, str],
    what: str,
    lookup: _Lookup,
) -> tuple[float | None, str | None]:
    if calibration is None:
        return None, "the run has no calibration.json (relative thresholds need one)"
    base = names.get(metric)
    if base is None:
        return None, f"metric {metric!r} has no calibrated {what} value"
    return lookup(calibration, base, length_class)


def unloaded_reference(
    calibration: Calibration | None, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(median seconds, None) or (None, why there is none)."""
    return _calibrated(calibration, metric, length_class, names=UNLOADED_METRICS,
                       what="unloaded", lookup=unloaded_median)  # fmt: skip


def capacity_reference(
    calibration: Calibration | None, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(saturation rate in the metric's unit, None) or (None, why there is none)."""
    return _calibrated(calibration, metric, length_class, names=CAPACITY_METRICS,
                       what="capacity", lookup=saturated_rate)  # fmt: skip


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


def resolve_relative(gate: Gate, calibration: Calibration | None) -> tuple[Gate, str | None]:
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
