"""The gates file's value objects: settings, per-request SLOs, scopes, regressions, gates.

Owns the frozen, keyword-only dataclasses a validated gates file is made of, and the names a
baseline may be matched on. It does not parse or validate YAML (`gate.gates.file`) and does not
judge (`gate.verdicts.evaluate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gate import glossary
from gate.units import Threshold, UnitKind

__all__ = [
    "BASELINE_MATCH_FIELDS",
    "Gate",
    "GatesFile",
    "Regression",
    "Scope",
    "Settings",
    "Slos",
]

BASELINE_MATCH_FIELDS = (
    "server_kind",
    "server_version",
    "model",
    "batching_hash",
    "profile_hash",
    "hardware",
)
# server_version is opt-in: manifest.json (docs/records.md) does not record it yet.
_DEFAULT_BASELINE_MATCH = ("server_kind", "model", "profile_hash", "hardware")


@dataclass(frozen=True, kw_only=True)
class Settings:
    confidence: float = 0.95
    inconclusive: str = "fail"  # what an inconclusive verdict does to the exit code
    warmup_seconds: float | None = None  # None: use load.json's window.warmup_seconds
    abort_grace_seconds: float = 30.0
    baseline_match: tuple[str, ...] = _DEFAULT_BASELINE_MATCH
    recovery_factor: float = 1.5
    recovery_window_seconds: float = 2.0


@dataclass(frozen=True, kw_only=True)
class Slos:
    """Per-request service levels a request must meet to count as goodput (seconds)."""

    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    e2e_seconds: float | None = None

    @property
    def empty(self) -> bool:
        return self.ttft_seconds is None and self.tpot_seconds is None and self.e2e_seconds is None


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Allowed values per scope key; None means any."""

    profile: tuple[str, ...] | None = None
    stage: tuple[str, ...] | None = None
    priority: tuple[str, ...] | None = None
    length_class: tuple[str, ...] | None = None
    endpoint: tuple[str, ...] | None = None

    def merged(self, other: Scope) -> Scope:
        values = {k: getattr(other, k) or getattr(self, k) for k in glossary.SCOPE_KEYS}
        return Scope(**values)

    def to_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k in glossary.SCOPE_KEYS if (v := getattr(self, k)) is not None}


@dataclass(frozen=True, kw_only=True)
class Regression:
    """Fail when the value moves past the baseline by more than the ratio AND the floor."""

    max_increase_ratio: float | None = None
    max_decrease_ratio: float | None = None
    warn_ratio: float | None = None
    floor: float = 0.0  # base units of the statistic


@dataclass(frozen=True, kw_only=True)
class Gate:
    name: str
    metric: str
    statistic: str
    scope: Scope
    line: int | None
    description: str = ""
    fail: Threshold | None = None
    warn: Threshold | None = None
    monitor: bool = False
    key: bool = False
    rollback: str | None = None
    knob: str | None = None
    abort_on_fail: bool = False
    relative_to: Scope | None = None
    regression: Regression | None = None
    slos: Slos | None = None
    warmup_seconds: float | None = None
    key_lines: Mapping[str, int] = field(default_factory=dict)  # e.g. {"fail": 12}

    @property
    def unit(self) -> UnitKind:
        if self.relative_to is not None:
            return UnitKind.FACTOR
        return glossary.statistic_unit(glossary.get_metric(self.metric), self.statistic)


@dataclass(frozen=True, kw_only=True)
class GatesFile:
    path: str
    version: int
    settings: Settings
    slos: Slos
    gates: tuple[Gate, ...]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    sha256: str = ""
