"""Whether a benchmark target is met, judged from its samples with the gate's own statistics.

On this VM one run's figure says little: the same benchmark gave an HTTP/offline ratio of 0.69
and of 1.06 minutes apart. A target row that prints one number next to its threshold then reads
as met or not met by the luck of the draw. This judges a quantile of several samples instead
(the median of same-round ratios, the p99 of probe latencies) with its distribution-free
one-sided bounds (gate.stats.quantile_with_bounds, as a `p99` gate does), and says "met" only
when the bound on the far side clears the target, "not met" only when the near bound misses it,
and "undecided" in between or with too few samples for a bound. Each claim holds at
`confidence` if the samples are independent draws; probes taken 25 ms apart in one run are not
quite, so their verdict is the weaker of the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gate.stats import quantile_with_bounds

__all__ = ["TargetVerdict", "judge"]

MET, NOT_MET, UNDECIDED = "met", "not met", "undecided"


@dataclass(frozen=True)
class TargetVerdict:
    value: float  # the sample quantile
    lower: float  # one-sided bounds of the true quantile; -inf / inf: too few samples
    upper: float
    target: float
    at_least: bool  # True: the target is a floor (value >= target), False: a ceiling
    samples: int
    verdict: str

    def to_dict(self) -> dict[str, object]:
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"value": finite(self.value), "lower": finite(self.lower),
                "upper": finite(self.upper), "target": self.target, "at_least": self.at_least,
                "samples": self.samples, "verdict": self.verdict}  # fmt: skip

    def cell(self, scale: float = 1.0, digits: int = 3) -> str:
        """`value [lower, upper] verdict`, e.g. `0.853 [0.83, 0.89] not met`."""
        if not math.isfinite(self.value):
            return "no samples"

        def one(x: float) -> str:
            return f"{x * scale:.{max(digits - 1, 0)}f}" if math.isfinite(x) else "?"

        bounds = f"[{one(self.lower)}, {one(self.upper)}]"
        return f"{self.value * scale:.{digits}f} {bounds} {self.verdict}"


def judge(
    values: Sequence[float], q: float, target: float, *, at_least: bool, confidence: float = 0.95
) -> TargetVerdict:
    """The q-quantile of `values` against `target` (a floor when `at_least`, else a ceiling)."""
    samples = np.asarray(values, dtype=float)
    value, bounds = quantile_with_bounds(samples, q, confidence=confidence)
    if at_least:
        met, missed = bounds.lower >= target, bounds.upper < target
    else:
        met, missed = bounds.upper <= target, bounds.lower > target
    verdict = MET if met else NOT_MET if missed else UNDECIDED
    return TargetVerdict(value, bounds.lower, bounds.upper, target, at_least, len(samples), verdict)
