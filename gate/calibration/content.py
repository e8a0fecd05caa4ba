"""calibration.json's content as typed values (docs/calibration.md), and its one parser.

Owns the file's shape (`CALIBRATION`, in `gate.json_shapes`' vocabulary), the values a reader
gets: the lone phase's distributions per length class and metric (`unloaded`), the saturated
rates per length class (`capacity`), the KV capacity the target stated, each client phase's
validity (`client`), the spec and identity it was taken with; and `parse_calibration`, which
checks a JSON object against the shape (`calibration.json: field: what is wrong`) and builds
them. A `Calibration` keeps the document it was made from, so one written again (reused into a
run directory, saved for reuse) is the same bytes. It does not read files (`json_io`), measure
(`gate.orchestrator.calibration`) or say what a value may serve for (`references`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gate.errors import BatchgateError, ExitCode
from gate.json_shapes import (
    ANY,
    BOOL,
    COUNT,
    NUMBER,
    OPT_COUNT,
    OPT_NUMBER,
    OPT_TEXT,
    TEXT,
    listing,
    mapping,
    nullable,
    obj,
    problem,
)

__all__ = [
    "CALIBRATION",
    "CALIBRATION_FILE",
    "CALIBRATION_SCHEMA_VERSION",
    "Calibration",
    "CalibrationError",
    "Capacity",
    "ClientPhase",
    "Distribution",
    "KvCapacity",
    "parse_calibration",
]

CALIBRATION_FILE = "calibration.json"
CALIBRATION_SCHEMA_VERSION = 1

_DISTRIBUTION = obj(p50=NUMBER, p90=OPT_NUMBER, n=COUNT)
_PHASE = obj(
    measurement_valid=BOOL,
    reasons=listing(TEXT),
    client_cpu_ratio=nullable(mapping(NUMBER)),
    workers=OPT_COUNT,
)
# calibration.json (docs/calibration.md). Keys it does not name are kept, not read.
CALIBRATION = obj(
    schema_version=COUNT,
    identity=mapping(ANY),
    spec=mapping(ANY),
    unloaded=mapping(mapping(_DISTRIBUTION)),
    capacity=mapping(mapping(OPT_NUMBER)),
    kv_capacity=nullable(obj(tokens=OPT_NUMBER, source=OPT_TEXT)),
    client=mapping(nullable(_PHASE)),
    took_seconds=OPT_NUMBER,
    measured_at=OPT_NUMBER,
    source=OPT_TEXT,
)


class CalibrationError(BatchgateError):
    """A calibration that cannot be had: the target could not be calibrated (no successful
    request, target died), or a calibration.json that is not one. No data unless told."""

    default_exit_code = ExitCode.NO_DATA


@dataclasses.dataclass(frozen=True, kw_only=True)
class Distribution:
    """One metric of the lone phase, in seconds. A hand-written file may leave any out."""

    p50: float | None = None
    p90: float | None = None
    n: int | None = None  # samples

    def to_json(self) -> dict[str, Any]:
        return {"p50": self.p50, "p90": self.p90, "n": self.n}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capacity:
    """The capacity sweep's chosen step for one length class: completed requests/s and output
    tokens/s (each with the lowest and highest of three sub-windows), its users and requests."""

    rps: float | None = None
    rps_low: float | None = None
    rps_high: float | None = None
    output_tokens_per_second: float | None = None
    output_tokens_per_second_low: float | None = None
    output_tokens_per_second_high: float | None = None
    mean_output_tokens: float | None = None
    users: int | None = None
    n: int | None = None

    def rate(self, name: str) -> float | None:
        """`rps` or `output_tokens_per_second`."""
        if name not in ("rps", "output_tokens_per_second"):
            raise ValueError(f"{name!r} is not a calibrated rate")
        return getattr(self, name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KvCapacity:
    tokens: float | None = None  # None: the target does not state it
    source: str | None = None  # where it was read ("unknown": nowhere)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientPhase:
    """The load generator's word on one calibration phase (its load.json)."""

    measurement_valid: bool | None = None  # None: not recorded
    reasons: tuple[str, ...] = ()
    client_cpu_ratio: Mapping[str, float] | None = None
    workers: int | None = None  # its Locust worker processes; None: not recorded


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """calibration.json, read. `problem` set: a file with a field of the wrong type, of which
    nothing else is read (a run directory's is judged no data, gate by gate)."""

    schema_version: int | None = None
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    spec: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    unloaded: Mapping[str, Mapping[str, Distribution]] = dataclasses.field(default_factory=dict)
    capacity: Mapping[str, Capacity] = dataclasses.field(default_factory=dict)
    kv_capacity: KvCapacity | None = None
    # Per phase (lone, capacity); None: a calibration that records no validity (hand-written,
    # from before `client` existed), read as it stands.
    client: Mapping[str, ClientPhase | None] | None = None
    took_seconds: float | None = None
    measured_at: float | None = None
    source: str | None = None  # how the run got it: fresh, reused, a file
    problem: str | None = None
    document: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def damaged(cls, problem: str) -> Calibration:
        return cls(problem=problem)

    def lone(self, metric: str, length_class: str = "short") -> Distribution | None:
        """The lone phase's distribution of `metric` (ttft, e2e, tpot, itl), if measured."""
        return self.unloaded.get(length_class, {}).get(metric)

    def capacity_workers(self) -> int | None:
        """The load-generator processes the capacity was measured with (what `--workers auto`
        runs the profiles with); None where the file does not say (written before it did)."""
        phase = (self.client or {}).get("capacity")
        workers = None if phase is None else phase.workers
        return workers if workers is not None and workers >= 1 else None

    def to_json(self) -> dict[str, Any]:
        """The document, as it was read or made (what `json_io.write_calibration` writes)."""
        return dict(self.document)

    def as_written(self, *sections: str) -> dict[str, Any]:
        """The named top-level sections as the file has them (None where absent): the copies
        manifest.json and tune.json keep."""
        return {name: self.document.get(name) for name in sections}

    def with_source(self, source: str) -> Calibration:
        return dataclasses.replace(
            self, source=source, document={**self.document, "source": source}
        )


def _fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _client(value: Mapping[str, Any] | None) -> ClientPhase | None:
    if value is None:
        return None
    return ClientPhase(
        measurement_valid=value.get("measurement_valid"),
        reasons=tuple(value.get("reasons") or ()),
        client_cpu_ratio=value.get("client_cpu_ratio"),
        workers=value.get("workers"),
    )


def parse_calibration(data: Any, *, name: str = CALIBRATION_FILE) -> Calibration:
    """The typed calibration of a JSON object; CalibrationError `name: field: what is wrong`
    for the first field of the wrong type (values are kept as written: no rounding)."""
    if not isinstance(data, dict):
        raise CalibrationError(f"{name}: expected a JSON object")
    wrong = problem(data, CALIBRATION)
    if wrong is not None:
        raise CalibrationError(f"{name}: {wrong}")
    kv = data.get("kv_capacity")
    client = data.get("client")
    return Calibration(
        schema_version=data.get("schema_version"),
        identity=data.get("identity") or {},
        spec=data.get("spec") or {},
        unloaded={
            length_class: {m: Distribution(**_fields(Distribution, d)) for m, d in metrics.items()}
            for length_class, metrics in (data.get("unloaded") or {}).items()
        },
        capacity={
            length_class: Capacity(**_fields(Capacity, rates))
            for length_class, rates in (data.get("capacity") or {}).items()
        },
        kv_capacity=None if kv is None else KvCapacity(**_fields(KvCapacity, kv)),
        client=None if client is None else {phase: _client(v) for phase, v in client.items()},
        took_seconds=data.get("took_seconds"),
        measured_at=data.get("measured_at"),
        source=data.get("source"),
        document=data,
    )
