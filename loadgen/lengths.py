"""Token-length distributions for prompts and outputs.

Owns the seeded length distributions (fixed, uniform, normal, lognormal, each with clamps) and
their validation from plain dicts. It does not know what a token is on a given server: callers
turn token counts into text (see `loadgen.prompts`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from loadgen.errors import ConfigError

__all__ = ["LengthDist"]

_KINDS = ("fixed", "uniform", "normal", "lognormal")
_FIELDS = ("kind", "value", "low", "high", "mean", "std", "median", "sigma", "min", "max")


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """A distribution of token counts; `min`/`max` clamp every sample.

    fixed: `value`; uniform: `low`..`high` inclusive; normal: `mean`, `std`;
    lognormal: `median`, `sigma` (of the underlying normal).
    """

    kind: str = "fixed"
    value: int = 64
    low: int = 1
    high: int = 128
    mean: float = 64.0
    std: float = 16.0
    median: float = 64.0
    sigma: float = 0.5
    min: int = 1
    max: int = 32768

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(f"length kind {self.kind!r} is not one of {', '.join(_KINDS)}")
        if self.min < 1 or self.max < self.min:
            raise ConfigError(
                f"length clamps need 1 <= min <= max, got min={self.min} max={self.max}"
            )
        if self.kind == "uniform" and self.high < self.low:
            raise ConfigError(f"uniform length needs low <= high, got {self.low} > {self.high}")
        if self.kind == "normal" and self.std < 0:
            raise ConfigError(f"normal length needs std >= 0, got {self.std}")
        if self.kind == "lognormal" and (self.median <= 0 or self.sigma < 0):
            raise ConfigError("lognormal length needs median > 0 and sigma >= 0")

    @classmethod
    def from_value(cls, value: Any) -> LengthDist:
        """An int means `fixed`; a dict gives the fields; unknown keys are errors."""
        if isinstance(value, LengthDist):
            return value
        if isinstance(value, bool):
            raise ConfigError(f"length must be an int or a mapping, got {value!r}")
        if isinstance(value, int):
            return cls(kind="fixed", value=value, min=1, max=max(value, 1))
        if not isinstance(value, dict):
            raise ConfigError(f"length must be an int or a mapping, got {value!r}")
        unknown = sorted(set(value) - set(_FIELDS))
        if unknown:
            raise ConfigError(f"unknown length key(s) {unknown}; known: {', '.join(_FIELDS)}")
        try:
            return cls(**value)
        except TypeError as exc:  # wrong value types surface here
            raise ConfigError(f"invalid length {value!r}: {exc}") from exc

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            raw = float(self.value)
        elif self.kind == "uniform":
            raw = float(rng.randint(self.low, self.high))
        elif self.kind == "normal":
            raw = rng.gauss(self.mean, self.std)
        else:
            raw = math.exp(rng.gauss(math.log(self.median), self.sigma))
        return int(min(max(round(raw), self.min), self.max))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
