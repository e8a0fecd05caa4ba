"""The percentile function of loadgen's own summaries (load.json schedule lag, progress line).

Owns linear-interpolated percentiles of plain float lists. It knows nothing about records: the
per-request formulas (TTFT, TPOT, ITL, ...) have exactly one home, the gate's (`gate.derive`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values. Not rounded."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
