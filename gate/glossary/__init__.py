"""The metric glossary (docs/gates.md) as data: every gateable metric's name and what fits it.

Owns, per metric: where it is measured (client / server / gpu / run), what shape its data has
(per-event samples, per-request events, a time series, a counter, one value per window), the
unit it is measured in, which statistics fit it and which scope keys apply; and the lookup by
name. The types are in `metric`, the entries in `entries`. It does not know how values are
computed (`gate.metrics.derive`) or judged (`gate.verdicts.evaluate`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType

from gate.glossary.entries import ENTRIES
from gate.glossary.metric import (
    PERCENTILES,
    SCOPE_KEYS,
    STATISTICS,
    Metric,
    Shape,
    Source,
    UnknownMetricError,
)
from gate.units import UnitKind

__all__ = [
    "METRICS",
    "PERCENTILES",
    "SCOPE_KEYS",
    "STATISTICS",
    "Metric",
    "Shape",
    "Source",
    "UnknownMetricError",
    "get_metric",
    "statistic_unit",
]

METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in ENTRIES})


def get_metric(name: str) -> Metric:
    """The glossary entry for `name`, or UnknownMetricError naming the closest ones."""
    try:
        return METRICS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(METRICS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownMetricError(
            f"unknown metric {name!r}{hint} (glossary: {', '.join(METRICS)})"
        ) from None


def statistic_unit(metric: Metric, statistic: str) -> UnitKind:
    """The unit a statistic of a metric is measured in: counts and rates change the unit."""
    if metric.shape in (Shape.EVENTS, Shape.COUNTER):
        if statistic in ("count", "delta"):
            return UnitKind.COUNT
        if statistic == "rate":
            return UnitKind.RATE
    return metric.unit
