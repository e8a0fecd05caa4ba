"""The capacity search of `batchgate sweep`: the highest offered rate at which every gate passes.

Owns the search itself: a short run of one profile per rate (`rate_rps` override; the gates
scoped to that profile plus the unscoped ones), bracketing by doubling from the minimum rate up
to the maximum, then bisecting to the tolerance; a point whose verdict is inconclusive is
repeated and counts as not passing if it stays so. It does not parse arguments, start the
target or print (`gate.commands.sweep`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import resolve_plans
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.runner import execute
from gate.verdicts.verdict import Status

__all__ = ["Point", "Search", "SearchSpec", "SweepFault"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSpec:
    profile: str
    scale: str
    overrides: dict[str, dict[str, Any]]  # profile -> key -> value, from --set
    requests_per_point: int  # each point sends this many, whatever its rate and the scale
    min_rate: float
    max_rate: float
    tolerance: float
    repeats: int
    max_points: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point:
    rate_rps: float
    outcome: str  # pass | fail | inconclusive | no_data
    exit_code: int
    run_dir: str
    failed: tuple[str, ...]  # gate ids that failed (or were not conclusive)
    tightest: str | None  # passing gate with the smallest relative margin

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _outcome(result: RunResult) -> Point:
    ev = result.evaluation
    code = int(result.exit_code)
    outcome = {0: "pass", 1: "fail", 3: "inconclusive"}.get(code, "no_data")
    failed: tuple[str, ...] = ()
    tightest = None
    if ev is not None:
        failed = tuple(
            v.id
            for v in ev.verdicts
            if v.blocking and v.status in (Status.FAIL, Status.INCONCLUSIVE, Status.NO_DATA)
        )
        margins = [
            (abs(v.margin / v.threshold_value), v.id)
            for v in ev.verdicts
            if v.blocking and v.status is Status.PASS and v.margin is not None and v.threshold_value
        ]
        tightest = min(margins)[1] if margins else None
    return Point(
        rate_rps=0.0,
        outcome=outcome,
        exit_code=code,
        run_dir=str(result.run_dir),
        failed=failed,
        tightest=tightest,
    )


class Search:
    """Bracket-and-bisect over the offered rate of one profile, one short run per point."""

    def __init__(self, spec: SearchSpec, base: RunConfig, sweep_dir: Path, view: LiveView) -> None:
        self.args, self.base, self.sweep_dir, self.view = spec, base, sweep_dir, view
        self.points: list[Point] = []

    def measure(self, rate: float) -> Point:
        extra = {k: dict(v) for k, v in self.args.overrides.items()}
        knobs = extra.setdefault(self.args.profile, {})
        knobs["rate_rps"] = rate
        # As many requests at every rate: a low rate is not inconclusive for lack of samples.
        knobs["duration_seconds"] = self.args.requests_per_point / rate
        plans = resolve_plans(
            [self.args.profile], self.base.gates_file, scale=self.args.scale, extra_overrides=extra
        )
        point = None
        for attempt in range(1 + max(self.args.repeats, 0)):
            config = dataclasses.replace(
                self.base,
                plans=tuple(plans),
                run_dir=self.sweep_dir / (f"rate-{rate:g}" + (f"-{attempt}" if attempt else "")),
            )
            result = execute(config, self.view)
            point = dataclasses.replace(_outcome(result), rate_rps=rate)
            self.points.append(point)
            self.view.message(
                f"batchgate sweep: {rate:g} req/s -> {point.outcome}"
                + (f" ({', '.join(point.failed)})" if point.failed else "")
            )
            if result.fault is not None:
                raise SweepFault(result.fault.message)
            if point.outcome != "inconclusive":
                break
        assert point is not None
        return point

    def search(self) -> tuple[float | None, float | None]:
        """(highest passing rate, lowest failing rate above it)."""
        a = self.args
        lo: float | None = None
        hi: float | None = None
        rate = a.min_rate
        while len(self.points) < a.max_points:
            if self.measure(rate).outcome == "pass":
                lo = rate
                if rate >= a.max_rate:
                    return lo, None
                rate = min(rate * 2.0, a.max_rate)
            else:
                hi = rate
                break
        if lo is None or hi is None:
            return lo, hi
        while hi / lo - 1.0 > a.tolerance and len(self.points) < a.max_points:
            mid = (lo + hi) / 2.0
            if self.measure(mid).outcome == "pass":
                lo = mid
            else:
                hi = mid
        return lo, hi


class SweepFault(Exception):
    """The target died or the run was interrupted mid-search; the message says which."""
