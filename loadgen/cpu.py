"""Client CPU: the load process's own CPU use as a fraction of one core.

Owns sampling `time.process_time()` against the monotonic clock over fixed intervals. It does not
decide validity (see `loadgen.load_json`) and does not know about gevent: callers run `sample()`
from whatever scheduler they use.
"""

from __future__ import annotations

import time

__all__ = ["CpuMeter"]

# The last sample of a run closes whatever is left of an interval: a few milliseconds spent
# handling the final responses would read as ~100% of a core and mark a healthy run saturated.
# An interval this short is folded into the one before it instead.
_MIN_INTERVAL_SECONDS = 0.25


class CpuMeter:
    def __init__(self) -> None:
        self.samples: list[float] = []
        self._spans: list[tuple[float, float]] = []  # (cpu seconds, wall seconds) per sample
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def sample(self) -> float:
        """The ratio over the interval since the last sample (the merged one when it was short)."""
        cpu, wall = time.process_time(), time.monotonic()
        span = (cpu - self._cpu, wall - self._wall)
        self._cpu, self._wall = cpu, wall
        if span[1] < _MIN_INTERVAL_SECONDS and self._spans:
            last = self._spans.pop()
            self.samples.pop()
            span = (last[0] + span[0], last[1] + span[1])
        ratio = span[0] / max(span[1], 1e-9)
        self._spans.append(span)
        self.samples.append(ratio)
        return ratio

    def summary(self) -> dict[str, float]:
        if not self.samples:
            return {"mean": 0.0, "max": 0.0}
        return {"mean": sum(self.samples) / len(self.samples), "max": max(self.samples)}
