"""Client CPU: the load process's own CPU use as a fraction of one core.

Owns sampling `time.process_time()` against the monotonic clock over fixed intervals. It does not
decide validity (see `loadgen.load_json`) and does not know about gevent: callers run `sample()`
from whatever scheduler they use.
"""

from __future__ import annotations

import time

__all__ = ["CpuMeter"]


class CpuMeter:
    def __init__(self) -> None:
        self.samples: list[float] = []
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def sample(self) -> float:
        cpu, wall = time.process_time(), time.monotonic()
        ratio = (cpu - self._cpu) / max(wall - self._wall, 1e-9)
        self._cpu, self._wall = cpu, wall
        self.samples.append(ratio)
        return ratio

    def summary(self) -> dict[str, float]:
        if not self.samples:
            return {"mean": 0.0, "max": 0.0}
        return {"mean": sum(self.samples) / len(self.samples), "max": max(self.samples)}
