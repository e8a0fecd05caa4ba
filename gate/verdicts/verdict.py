"""Verdict and Evaluation value objects, and the schema-versioned verdicts.json form.

Owns what one gate's judgement says (status, value, threshold, margin, n, interval, baseline
delta, the knob and rollback preset it implicates) and the dict form of a whole evaluation (the
schema of verdicts.json). It does not decide verdicts (`gate.verdicts.evaluate`), read or write
files, or render them (`gate.outputs`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gate.errors import ExitCode

__all__ = [
    "VERDICTS_SCHEMA_VERSION",
    "Evaluation",
    "Status",
    "Verdict",
]

VERDICTS_SCHEMA_VERSION = 1
_MONOTONE = ("max", "peak", "count", "delta")  # statistics that only grow with more data


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    NO_DATA = "no_data"


def _finite(value: float | None) -> float | None:
    # JSON has no infinity; an unbounded interval side is written as null.
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    gate: str
    profile: str | None
    status: Status
    metric: str
    statistic: str
    unit: str
    scope: dict[str, list[str]]
    value: float | None = None
    threshold: str | None = None
    threshold_value: float | None = None
    margin: float | None = None  # threshold - value in the good direction (positive: headroom)
    n: int = 0
    interval: tuple[float | None, float | None] | None = None
    confidence: float = 0.95
    reason: str = ""
    estimate: bool = False
    of_total: bool = False
    monitor: bool = False
    key: bool = False
    knob: str | None = None
    rollback: str | None = None
    baseline_value: float | None = None
    baseline_delta_ratio: float | None = None
    reference_value: float | None = None  # the other scope's statistic for ratio gates
    notes: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.gate if self.profile is None else f"{self.gate}@{self.profile}"

    @property
    def confident_failure(self) -> bool:
        """A failure more data cannot undo (what may stop a run early, `abort_on_fail`): judged
        on an interval (its bound is past the limit), or a statistic that only grows (max,
        peak, count, delta) already past an upper limit (a `> x` it may still reach is not)."""
        if self.status is not Status.FAIL:
            return False
        if self.interval is not None:
            return True
        if self.statistic not in _MONOTONE:
            return False
        # Growing further cannot bring it back under an upper limit, or back down to `== x`.
        op = (self.threshold or "").lstrip()[:2]
        value, limit = self.value, self.threshold_value
        return op.startswith("<") or (
            op == "==" and value is not None and limit is not None and value > limit
        )

    @property
    def blocking(self) -> bool:
        """Whether this verdict takes part in the exit code (monitors never do)."""
        return not self.monitor

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["id"] = self.id
        for key in (
            "value",
            "threshold_value",
            "margin",
            "baseline_value",
            "baseline_delta_ratio",
            "reference_value",
        ):
            data[key] = _finite(data[key])
        if self.interval is not None:
            data["interval"] = [_finite(self.interval[0]), _finite(self.interval[1])]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        if not isinstance(data, dict):
            raise ValueError(f"a verdict must be a JSON object, got {data!r:.60}")
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["status"] = Status(values["status"])
        if values.get("interval") is not None:
            low, high = values["interval"]
            values["interval"] = (
                -math.inf if low is None else low,
                math.inf if high is None else high,
            )
        values["notes"] = tuple(values.get("notes") or ())
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    verdicts: list[Verdict]
    exit_code: ExitCode
    inconclusive_policy: str = "fail"
    confidence: float = 0.95
    run_path: str | None = None
    gates_file: str | None = None
    baseline: str | None = None
    notes: tuple[str, ...] = ()
    rollback_target: str | None = field(default=None)

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for verdict in self.verdicts:
            counts[verdict.status.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": VERDICTS_SCHEMA_VERSION,
            "exit_code": int(self.exit_code),
            "result": self.exit_code.name.lower(),
            "inconclusive_policy": self.inconclusive_policy,
            "confidence": self.confidence,
            "run_path": self.run_path,
            "gates_file": self.gates_file,
            "baseline": self.baseline,
            "rollback_target": self.rollback_target,
            "notes": list(self.notes),
            "counts": self.counts(),
            "verdicts": [v.to_dict() for v in self.verdicts],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != VERDICTS_SCHEMA_VERSION:
            raise ValueError(
                f"verdicts.json schema_version {version!r} is not {VERDICTS_SCHEMA_VERSION}"
            )
        if not isinstance(data.get("verdicts"), list):
            raise ValueError("'verdicts' must be a list")
        return cls(
            verdicts=[Verdict.from_dict(v) for v in data["verdicts"]],
            exit_code=ExitCode(data["exit_code"]),
            inconclusive_policy=data.get("inconclusive_policy", "fail"),
            confidence=data.get("confidence", 0.95),
            run_path=data.get("run_path"),
            gates_file=data.get("gates_file"),
            baseline=data.get("baseline"),
            notes=tuple(data.get("notes") or ()),
            rollback_target=data.get("rollback_target"),
        )
