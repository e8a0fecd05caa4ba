"""A candidate of `batchgate tune`: one set of knob values, and what each run of it measured.

Owns `Candidate` (the settings of every tuned knob, where the search found it, its runs; its key
and its label as a person reads it) and `Measurement` (one run at one rung: the outcome, the
objective with its interval, the throughput and TTFT p99 of the trade-off figure, each gate's
status), and their plain-data form for tune.json (`to_dict`). It does not measure
(`gate.tune.runner`) or choose (`gate.tune.search`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gate.tune.space import candidate_key, short_name

__all__ = ["Candidate", "Measurement"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """One run of one candidate at one rung."""

    rung: int
    scale: str
    outcome: str  # pass | fail | inconclusive | no_data | interrupted
    exit_code: int
    run_dir: str
    seconds: float
    startup_seconds: float = 0.0  # of `seconds`: starting the candidate's own server
    objective: float | None = None
    objective_interval: tuple[float | None, float | None] | None = None
    objective_n: int = 0
    throughput: float | None = None  # output tokens/s of the profile
    latency_p99: float | None = None  # seconds (the trade-off figure's y)
    gates: Mapping[str, str] = dataclasses.field(default_factory=dict)  # gate id -> status
    key_gates: tuple[str, ...] = ()  # the gates marked `key: true` (the table's columns)
    failed: tuple[str, ...] = ()  # blocking gates that did not pass
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["gates"] = dict(self.gates)
        return data


@dataclasses.dataclass(kw_only=True)
class Candidate:
    settings: dict[str, Any]  # knob path -> value (every tuned knob)
    origin: str  # incumbent | coarse | refine | combined
    measurements: list[Measurement] = dataclasses.field(default_factory=list)

    @property
    def key(self) -> str:
        return candidate_key(self.settings)

    @property
    def label(self) -> str:
        """The settings as a person reads them: short knob names (max_wait_ms for the
        interactive class's), in the order of the knobs."""
        return ", ".join(
            f"{short_name(k)}={'default' if v is None else v}" for k, v in self.settings.items()
        )

    @property
    def latest(self) -> Measurement | None:
        return self.measurements[-1] if self.measurements else None

    def at(self, rung: int) -> Measurement | None:
        return next((m for m in reversed(self.measurements) if m.rung == rung), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "origin": self.origin,
            "measurements": [m.to_dict() for m in self.measurements],
        }
