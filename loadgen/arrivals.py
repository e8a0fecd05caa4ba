"""Arrival processes: when each request is planned, computed up front and seeded.

Owns the constant-rate, Poisson and gamma (burstiness) processes. Arrivals are drawn as a
unit-rate renewal process and mapped through the schedule's cumulative rate (time rescaling),
so ramps and piecewise rates need no thinning and the same seed gives the same plan. It does not
know about requests, workers or clocks.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.shapes import RateSchedule

__all__ = ["ArrivalProcess", "generate_arrivals", "iter_arrivals"]

_KINDS = ("constant", "poisson", "gamma")


@dataclass(frozen=True, kw_only=True)
class ArrivalProcess:
    """`gamma_shape` < 1 is burstier than Poisson, > 1 smoother (coefficient of variation
    1/sqrt(shape)); it is only used by `gamma`."""

    kind: str = "poisson"
    gamma_shape: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(f"arrival kind {self.kind!r} is not one of {', '.join(_KINDS)}")
        if self.gamma_shape <= 0:
            raise ConfigError(f"gamma_shape must be > 0, got {self.gamma_shape}")

    def unit_gap(self, rng: random.Random) -> float:
        """One inter-arrival gap of the unit-rate process (mean 1)."""
        if self.kind == "constant":
            return 1.0
        if self.kind == "poisson":
            return rng.expovariate(1.0)
        return rng.gammavariate(self.gamma_shape, 1.0 / self.gamma_shape)


def generate_arrivals(
    process: ArrivalProcess, schedule: RateSchedule, *, seed: int, max_arrivals: int = 5_000_000
) -> list[tuple[float, str]]:
    """(offset_seconds, stage) of every arrival in the schedule, in time order."""
    out: list[tuple[float, str]] = []
    for arrival in iter_arrivals(process, schedule, seed=seed):
        if len(out) >= max_arrivals:
            raise ConfigError(f"schedule would plan more than {max_arrivals} arrivals")
        out.append(arrival)
    return out


def iter_arrivals(
    process: ArrivalProcess, schedule: RateSchedule, *, seed: int
) -> Iterator[tuple[float, str]]:
    """The arrivals of `generate_arrivals`, one at a time (the first alone is cheap to ask)."""
    rng = random.Random(seed)
    total = schedule.expected_count
    # Constant arrivals start half a gap in so a 1 s schedule at 1 rps sends exactly once.
    count = 0.5 if process.kind == "constant" else process.unit_gap(rng)
    while count <= total:
        t = schedule.time_for_count(count)
        if t is None:
            return
        tick = schedule.tick(t)
        if tick is None:
            return
        yield t, tick.stage
        count += process.unit_gap(rng)
