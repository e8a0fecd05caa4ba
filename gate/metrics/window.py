"""The measured window of a profile and what a scope selects in time and in requests.

Owns the window (load.json's, or the records' own span while a load runs, warm-up cut off), the
wall-clock intervals and seconds a stage scope covers, and the request-record mask of a scope.
It does not know metrics or formulas (`gate.metrics.derive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gate.gates.spec import Scope
    from gate.rundir.run import ProfileData

__all__ = [
    "Window",
    "in_intervals",
    "request_mask",
    "scope_seconds",
    "stage_intervals",
    "window_of",
]


@dataclass(frozen=True, kw_only=True)
class Window:
    """Measured window in request-record (monotonic) seconds, warm-up already cut off."""

    start: float
    end: float
    activity_end: float  # last request finished (server metrics look until here)

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


def window_of(profile: ProfileData, *, warmup_seconds: float | None) -> Window | None:
    """The measured window from load.json (or, while a load still runs, from the records)."""
    load = profile.load or {}
    req = profile.requests
    window = load.get("window") or {}
    start, end = window.get("start"), window.get("end")
    if start is None or end is None:
        if req is None or req.n == 0:
            return None
        start, end = float(np.nanmin(req.planned_at)), float(np.nanmax(req.planned_at))
    warmup = (
        warmup_seconds if warmup_seconds is not None else float(window.get("warmup_seconds") or 0.0)
    )
    activity_end = float(end)
    if req is not None and req.n and not np.all(np.isnan(req.done_at)):
        activity_end = max(activity_end, float(np.nanmax(req.done_at)))
    return Window(start=float(start) + warmup, end=float(end), activity_end=activity_end)


def request_mask(
    profile: ProfileData, scope: Scope, window: Window, *, probes: bool = False
) -> np.ndarray:
    """The records of `scope` in `window`; answer-consistency probes (records marked `probe`)
    only with `probes`: they are load, but a probe's latency is not the profile's traffic's."""
    req = profile.requests
    assert req is not None  # callers check
    # Both ends: the load plans nothing after its window's end, so a record planned later is
    # not of this measurement (a records file with another load's lines appended).
    mask = (req.planned_at >= window.start) & (req.planned_at <= window.end)
    if not probes and req.probe is not None:
        mask &= np.isnan(req.probe)
    for key in ("stage", "priority", "length_class", "endpoint"):
        part = getattr(req, key).mask(getattr(scope, key))
        if part is not None:
            mask &= part
    return mask


def stage_intervals(
    profile: ProfileData, scope: Scope, window: Window
) -> list[tuple[float, float]] | None:
    """Wall-clock intervals the scope covers; None when times cannot be converted."""
    start, end = profile.to_wall(window.start), profile.to_wall(window.activity_end)
    if start is None or end is None:
        return None
    if scope.stage is None:
        return [(start, end)]
    intervals = []
    for stage in (profile.load or {}).get("stages") or []:
        if stage.get("name") in scope.stage:
            s, e = profile.to_wall(stage["start"]), profile.to_wall(stage["end"])
            if s is not None and e is not None:
                intervals.append((max(s, start), min(e, end)))
    return intervals


def in_intervals(t: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    mask = np.zeros(len(t), dtype=bool)
    for s, e in intervals:
        mask |= (t >= s) & (t <= e)
    return mask


def scope_seconds(profile: ProfileData, scope: Scope, window: Window) -> float:
    if scope.stage is None:
        return window.seconds
    total = 0.0
    for stage in (profile.load or {}).get("stages") or []:
        if stage.get("name") in scope.stage:
            total += max(min(stage["end"], window.end) - max(stage["start"], window.start), 0.0)
    return total
