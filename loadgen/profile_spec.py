"""A resolved traffic profile: its kinds of request (`TrafficClass`) and everything a load needs
to run it (`ProfileSpec`).

Owns the two value types `loadgen.profiles.resolve` returns and the catalogue's builders make. It
does not know which profiles exist (`loadgen.catalogue`) or how overrides are applied
(`loadgen.profiles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.arrivals import ArrivalProcess
from loadgen.lengths import LengthDist
from loadgen.replay import Replay
from loadgen.shapes import RateSchedule

__all__ = ["ProfileSpec", "TrafficClass"]


@dataclass(frozen=True, kw_only=True)
class TrafficClass:
    """One kind of request in a profile's mix, `weight` its share of the requests (dealt in
    shuffled decks that hold the shares: loadgen/plan.py)."""

    weight: float
    priority: str
    length_class: str
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    # Dealt only in these stages (None: in all); a stage's deck holds the classes dealt in it.
    stages: tuple[str, ...] | None = None
    # Request-body fields this class adds (e.g. thinking on), and "mixed" to draw each request's
    # sampling parameters from `loadgen.sampling_mix` (the batch-alignment profile).
    extra_body: Mapping[str, Any] | None = None
    sampling: str = "default"


@dataclass(frozen=True, kw_only=True)
class ProfileSpec:
    name: str
    scale: str
    params: dict[str, Any]
    schedule: RateSchedule
    arrival: ArrivalProcess
    classes: tuple[TrafficClass, ...]
    # How requests are made: "schedule" (arrivals from `schedule`, or closed-loop users),
    # "sessions" (multi-turn conversations, loadgen.conversations) or "trace" (a replay).
    driver: str = "schedule"
    replay: Replay | None = None  # the trace profile's window, as it will be sent

    @property
    def mode(self) -> str:
        return str(self.params["mode"])

    @property
    def seed(self) -> int:
        return int(self.params["seed"])
