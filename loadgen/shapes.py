"""Rate schedules: the offered request rate as a pure function of time.

Owns piecewise stages (constant or linearly ramping rate, each with a name that is tagged on the
records sent during it), `tick(t)` in the spirit of Locust's `LoadTestShape.tick()`, and the
cumulative rate used to place arrivals. It does not know about arrival randomness (see
`loadgen.arrivals`) nor about Locust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.errors import ConfigError

__all__ = ["RateSchedule", "RateStage", "RateTick"]


@dataclass(frozen=True, kw_only=True)
class RateStage:
    """`duration_seconds` at `rate_rps`, ramping linearly to `end_rate_rps` when given."""

    name: str
    duration_seconds: float
    rate_rps: float
    end_rate_rps: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a stage needs a name")
        if not (self.duration_seconds > 0 and math.isfinite(self.duration_seconds)):
            raise ConfigError(f"stage {self.name!r}: duration_seconds must be > 0")
        if self.rate_rps < 0 or (self.end_rate_rps is not None and self.end_rate_rps < 0):
            raise ConfigError(f"stage {self.name!r}: rates must be >= 0")

    @property
    def final_rate_rps(self) -> float:
        return self.rate_rps if self.end_rate_rps is None else self.end_rate_rps

    def rate_at(self, offset_seconds: float) -> float:
        slope = (self.final_rate_rps - self.rate_rps) / self.duration_seconds
        return self.rate_rps + slope * offset_seconds

    def count_until(self, offset_seconds: float) -> float:
        """Expected arrivals from the stage start to `offset_seconds` (integral of the rate)."""
        slope = (self.final_rate_rps - self.rate_rps) / self.duration_seconds
        return self.rate_rps * offset_seconds + 0.5 * slope * offset_seconds**2

    def offset_for_count(self, count: float) -> float:
        """Inverse of `count_until` within the stage."""
        a = self.rate_rps
        slope = (self.final_rate_rps - a) / self.duration_seconds
        if abs(slope) < 1e-12:
            return count / a if a > 0 else self.duration_seconds
        # 0.5*slope*t^2 + a*t - count = 0, the root that is >= 0 inside the stage
        disc = max(a * a + 2.0 * slope * count, 0.0)
        return (-a + math.sqrt(disc)) / slope


@dataclass(frozen=True, kw_only=True)
class RateTick:
    rate_rps: float
    stage: str


@dataclass(frozen=True)
class RateSchedule:
    """Stages run back to back from t = 0."""

    stages: tuple[RateStage, ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigError("a rate schedule needs at least one stage")

    @property
    def duration_seconds(self) -> float:
        return sum(s.duration_seconds for s in self.stages)

    @property
    def expected_count(self) -> float:
        return sum(s.count_until(s.duration_seconds) for s in self.stages)

    @property
    def mean_rate_rps(self) -> float:
        return self.expected_count / self.duration_seconds

    def tick(self, t_seconds: float) -> RateTick | None:
        """Rate and stage at `t_seconds` since the start; None once the schedule is over."""
        if t_seconds < 0:
            return RateTick(rate_rps=0.0, stage=self.stages[0].name)
        start = 0.0
        for stage in self.stages:
            if t_seconds < start + stage.duration_seconds:
                return RateTick(rate_rps=stage.rate_at(t_seconds - start), stage=stage.name)
            start += stage.duration_seconds
        return None

    def stage_bounds(self) -> list[tuple[str, float, float]]:
        """(name, start, end) offsets of each stage."""
        out, start = [], 0.0
        for stage in self.stages:
            out.append((stage.name, start, start + stage.duration_seconds))
            start += stage.duration_seconds
        return out

    def time_for_count(self, count: float) -> float | None:
        """The time at which the cumulative expected arrivals reach `count`; None past the end."""
        start = 0.0
        for stage in self.stages:
            in_stage = stage.count_until(stage.duration_seconds)
            if count <= in_stage and in_stage > 0:
                return start + min(stage.offset_for_count(count), stage.duration_seconds)
            count -= in_stage
            start += stage.duration_seconds
        return None

    def scaled(self, factor: float) -> RateSchedule:
        """Same rates, every duration multiplied by `factor` (CI scales)."""
        return RateSchedule(
            tuple(
                RateStage(
                    name=s.name,
                    duration_seconds=s.duration_seconds * factor,
                    rate_rps=s.rate_rps,
                    end_rate_rps=s.end_rate_rps,
                )
                for s in self.stages
            )
        )
