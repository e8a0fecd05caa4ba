"""A figure of the HTML report as data (`Figure`), and the two questions every figure asks of a
profile: which classes (priority, length class) its records have, and a metric's measurement in
a scope, through `gate.metrics.derive` with the default settings and no SLOs.

Owns those. It does not choose the figures (`gate.outputs.html.series`, `gate.outputs.html.cdf`)
or draw them (`gate.outputs.html.svg`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gate.gates.spec import Scope, Settings, Slos
from gate.metrics import derive, measurements
from gate.outputs.html.svg import Band, Line
from gate.rundir.run import ProfileData
from gate.units import UnitKind

__all__ = ["Figure", "classes_of", "measure_in"]

_DEFAULT_SETTINGS = Settings()
_NO_SLOS = Slos()


@dataclass(frozen=True, kw_only=True)
class Figure:
    key: str  # stable id, e.g. "ttft-cdf"
    title: str
    x_label: str
    y_label: str
    x_unit: UnitKind
    y_unit: UnitKind
    lines: tuple[Line, ...] = ()
    bands: tuple[Band, ...] = ()
    x_log: bool = False
    y_min: float | None = None
    y_max: float | None = None
    note: str | None = None
    no_data: str | None = None  # set exactly when there is nothing to draw

    @property
    def has_data(self) -> bool:
        return self.no_data is None


def classes_of(profile: ProfileData, key: str) -> list[str]:
    req = profile.requests
    if req is None:
        return []
    column = getattr(req, key)
    present = set(np.unique(column.codes).tolist())
    return [name for i, name in enumerate(column.names) if i in present]


def measure_in(
    profile: ProfileData, metric: str, statistic: str, scope: Scope, *, warmup: float | None
) -> measurements.Measurement:
    return derive.measure(
        profile,
        metric,
        statistic,
        scope,
        slos=_NO_SLOS,
        settings=_DEFAULT_SETTINGS,
        warmup_seconds=warmup,
    )
