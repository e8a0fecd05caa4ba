"""What a calibration can serve as a reference for, and why not (docs/calibration.md).

Owns the phase rules: which calibration phase measured which section (`unloaded`: the lone
phase; `capacity`: the capacity sweep's chosen step; `kv_capacity` is the server's own word, no
phase's), and whether that phase was a valid measurement (`client.<phase>.measurement_valid`: a
saturated client timed itself, so its figures are no reference; a calibration that records no
validity is read as it stands, one that records it must say `true`). And the lookups every
reader asks: the unloaded median of a calibrated metric for a length class, a saturated rate,
the KV capacity in tokens, each as (value, None) or (None, why there is none). It does not know
gates or profiles: which gate metric compares with which calibrated one is
`gate.verdicts.relative`'s, what a profile value resolves to `gate.orchestrator.relative`'s.
"""

from __future__ import annotations

import math

from gate.calibration.content import Calibration

__all__ = [
    "PHASE_SECTIONS",
    "invalid_phases",
    "kv_capacity_tokens",
    "phase_problem",
    "saturated_rate",
    "unloaded_median",
]

# The calibration phase whose measurement each section comes from (calibration.json `client`).
_PHASES = {"unloaded": "lone", "capacity": "capacity"}
# The calibration.json sections a client phase measured.
PHASE_SECTIONS = frozenset(_PHASES)


def phase_problem(calibration: Calibration, section: str) -> str | None:
    """Why the phase that measured `section` (`unloaded`, `capacity`) cannot serve as a
    reference (None: it can)."""
    if calibration.problem is not None:
        return calibration.problem
    if calibration.client is None:
        return None
    phase = _PHASES[section]
    record = calibration.client.get(phase)
    if record is None or record.measurement_valid is True:
        return None
    why = "; ".join(record.reasons) or "no reason given"
    return (
        f"the calibration's {phase} phase was not a valid measurement"
        f" ({why}): its {section} values are no reference"
    )


def invalid_phases(calibration: Calibration) -> list[str]:
    """Why the calibration's client phases were not valid measurements (empty: they were)."""
    problems = (phase_problem(calibration, section) for section in sorted(PHASE_SECTIONS))
    return list(dict.fromkeys(problem for problem in problems if problem is not None))


def _positive(
    value: float | None, section: str, name: str, length_class: str
) -> tuple[float | None, str | None]:
    if value is None:
        return None, f"calibration.json has no {section} {name} for {length_class} requests"
    if not math.isfinite(value) or value <= 0:
        return None, (
            f"calibration.json: the {section} {name} for {length_class} requests is {value!r},"
            " not a positive number"
        )
    return float(value), None


def unloaded_median(
    calibration: Calibration, metric: str, length_class: str
) -> tuple[float | None, str | None]:
    """(the lone phase's median of `metric` (ttft, e2e, tpot, itl) in seconds, None), or (None,
    why there is none): an invalid lone phase, no such distribution, no sample, not > 0."""
    problem = phase_problem(calibration, "unloaded")
    if problem is not None:
        return None, problem
    distribution = calibration.lone(metric, length_class)
    if distribution is None:
        return _positive(None, "unloaded", metric, length_class)
    n = distribution.n
    if n is not None and not n >= 1:
        where = f"unloaded.{length_class}.{metric}"
        return None, f"calibration.json: {where}.n is {n!r}, not a sample count"
    return _positive(distribution.p50, "unloaded", metric, length_class)


def saturated_rate(
    calibration: Calibration, rate: str, length_class: str
) -> tuple[float | None, str | None]:
    """(the capacity's `rate` (`rps`, `output_tokens_per_second`), None), or (None, why there
    is none): an invalid capacity phase, no such rate, not > 0."""
    problem = phase_problem(calibration, "capacity")
    if problem is not None:
        return None, problem
    capacity = calibration.capacity.get(length_class)
    return _positive(None if capacity is None else capacity.rate(rate), "capacity", rate,
                     length_class)  # fmt: skip


def kv_capacity_tokens(calibration: Calibration | None) -> float | None:
    """The KV capacity in tokens the target stated (positive), else None (unknown: no guess)."""
    kv = None if calibration is None else calibration.kv_capacity
    tokens = None if kv is None else kv.tokens
    if tokens is None or not math.isfinite(tokens) or tokens <= 0:
        return None
    return tokens
