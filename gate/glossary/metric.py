"""The glossary's vocabulary: a metric's entry (`Metric`), where it is measured (`Source`), the
shape of its data (`Shape`), the statistics and scope keys a gate may name.

Owns these types and constants. It does not list the metrics (`gate.glossary.entries`) or look
them up (`gate.glossary`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gate.errors import BatchgateError, ExitCode
from gate.units import UnitKind

__all__ = [
    "PERCENTILES",
    "SCOPE_KEYS",
    "STATISTICS",
    "Metric",
    "Shape",
    "Source",
    "UnknownMetricError",
]


class UnknownMetricError(BatchgateError, KeyError):
    """A metric name that is not in the glossary; the message suggests the nearest names."""

    default_exit_code = ExitCode.INVALID_GATES

    def __str__(self) -> str:
        return str(self.args[0])


class Source(str, enum.Enum):
    CLIENT = "client"
    SERVER = "server"
    GPU = "gpu"
    RUN = "run"


class Shape(str, enum.Enum):
    SAMPLES = "samples"  # one value per event (request, token gap, step): percentiles fit
    EVENTS = "events"  # a yes/no per request: count, rate, mean (= share of requests)
    SERIES = "series"  # sampled over time: peak, mean, final
    COUNTER = "counter"  # monotonically increasing total: delta, rate
    SCALAR = "scalar"  # one value for the window


PERCENTILES: Mapping[str, float] = MappingProxyType(
    {"p50": 0.50, "p75": 0.75, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}
)
STATISTICS = (*PERCENTILES, "max", "mean", "rate", "count", "peak", "delta", "final")
SCOPE_KEYS = ("profile", "stage", "priority", "length_class", "endpoint")


@dataclass(frozen=True, kw_only=True)
class Metric:
    name: str
    source: Source
    shape: Shape
    unit: UnitKind
    statistics: tuple[str, ...]
    scopes: frozenset[str]
    description: str
    # Histogram name in scrapes.jsonl that estimates this metric when exact samples are absent.
    histogram: str | None = None
    higher_is_better: bool = False
    # On a target other than the bundled server a failure is reported as a warning (with what
    # was measured): information about that server, not a fault of the run.
    warn_only_on_foreign: bool = False

    @property
    def default_statistic(self) -> str | None:
        return self.statistics[0] if len(self.statistics) == 1 else None
