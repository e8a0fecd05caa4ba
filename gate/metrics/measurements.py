"""The measurement value types `gate.metrics.derive` returns and `gate.verdicts.assess` judges.

Owns Samples, Histogram, Events, Series, Scalar and NoData (with its reason). It does not know
how they are derived (`gate.metrics.derive`) or judged (`gate.verdicts.assess`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Events", "Histogram", "Measurement", "NoData", "Samples", "Scalar", "Series"]


@dataclass(frozen=True, kw_only=True)
class Samples:
    values: np.ndarray
    estimate: bool = False
    note: str | None = None  # said with the verdict (e.g. how censored samples were counted)


@dataclass(frozen=True, kw_only=True)
class Histogram:
    """Cumulative bucket counts over the window; always an estimate of the distribution."""

    bounds: np.ndarray  # ascending `le` values, last one +inf
    cumulative: np.ndarray
    total_sum: float

    @property
    def count(self) -> int:
        return int(self.cumulative[-1]) if len(self.cumulative) else 0


@dataclass(frozen=True, kw_only=True)
class Events:
    hits: int
    total: int
    window_seconds: float


@dataclass(frozen=True, kw_only=True)
class Series:
    values: np.ndarray
    totals: np.ndarray | None = None  # for "% of device total"
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class Scalar:
    value: float
    n: int = 1
    note: str | None = None
    lower_bound: bool = False  # the true value is at least this (e.g. not recovered yet)


@dataclass(frozen=True, kw_only=True)
class NoData:
    reason: str


Measurement = Samples | Histogram | Events | Series | Scalar | NoData
