"""The JSON shapes of the run directory's files (docs/records.md), checked where they are read.

Owns a small vocabulary of shapes (number, count, text, object with typed fields, map, list,
nullable) and the shape of each file a reader takes whole: `manifest.json`, `load.json`,
`calibration.json`, `verdicts.json`, and one line of `scrapes.jsonl`. `problem(value, shape)`
names the first field of the wrong type as `field: what is wrong`; the readers prefix the file
and refuse the run (exit 5) or, for the calibration, judge it no data. Keys a shape does not
name are allowed (a newer writer may add fields); which keys must be present is the readers'
rule, not this module's. It does not read files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANY",
    "BOOL",
    "CALIBRATION",
    "COUNT",
    "LOAD",
    "MANIFEST",
    "NUMBER",
    "SCRAPE",
    "TEXT",
    "VERDICTS",
    "VERDICT_KEYS",
    "Shape",
    "listing",
    "mapping",
    "obj",
    "oneof",
    "problem",
]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(frozen=True)
class Shape:
    """What a JSON value must be: `kind` one of number, count, text, bool, any, object, map,
    list, oneof; `nullable` allows null."""

    kind: str
    nullable: bool = False
    fields: Mapping[str, Shape] = field(default_factory=dict)  # object
    item: Shape | None = None  # map values, list items
    options: tuple[Shape, ...] = ()  # oneof

    def describe(self) -> str:
        text = {
            "number": "a number",
            "count": "a whole number >= 0",
            "text": "text",
            "bool": "true or false",
            "any": "any value",
            "object": "an object",
            "map": "an object",
            "list": "a list",
        }.get(self.kind) or " or ".join(o.describe() for o in self.options)
        return f"{text} or null" if self.nullable else text


def _n(shape: Shape) -> Shape:
    return Shape(shape.kind, True, shape.fields, shape.item, shape.options)


NUMBER, COUNT, TEXT, BOOL, ANY = (Shape(k) for k in ("number", "count", "text", "bool", "any"))


def obj(**fields: Shape) -> Shape:
    return Shape("object", fields=fields)


def mapping(item: Shape) -> Shape:
    return Shape("map", item=item)


def listing(item: Shape) -> Shape:
    return Shape("list", item=item)


def oneof(*options: Shape) -> Shape:
    return Shape("oneof", options=options)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def problem(value: Any, shape: Shape, where: str = "") -> str | None:
    """`field: expected X, got Y` for the first value of the wrong shape, else None."""
    if value is None:
        if shape.nullable or shape.kind == "any":
            return None
        return _wrong(where, shape, value)
    kind = shape.kind
    if kind == "any":
        return None
    if kind == "number":
        return None if _is_number(value) else _wrong(where, shape, value)
    if kind == "count":
        good = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if good else _wrong(where, shape, value)
    if kind == "text":
        return None if isinstance(value, str) else _wrong(where, shape, value)
    if kind == "bool":
        return None if isinstance(value, bool) else _wrong(where, shape, value)
    if kind == "oneof":
        if any(problem(value, option) is None for option in shape.options):
            return None
        return _wrong(where, shape, value)
    if kind in ("object", "map"):
        if not isinstance(value, dict):
            return _wrong(where, shape, value)
        if kind == "object":
            for key, inner in shape.fields.items():
                if key in value:
                    found = problem(value[key], inner, _join(where, key))
                    if found:
                        return found
            return None
        assert shape.item is not None
        for key, item in value.items():
            found = problem(item, shape.item, _join(where, str(key)))
            if found:
                return found
        return None
    if kind == "list":
        if not isinstance(value, list):
            return _wrong(where, shape, value)
        assert shape.item is not None
        for index, item in enumerate(value):
            found = problem(item, shape.item, f"{where}[{index}]")
            if found:
                return found
        return None
    raise ValueError(f"unknown shape kind {kind!r}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _wrong(where: str, shape: Shape, value: Any) -> str:
    return f"{where or 'the file'}: expected {shape.describe()}, got {_kind(value)}"


OPT_TEXT, OPT_NUMBER, OPT_COUNT = _n(TEXT), _n(NUMBER), _n(COUNT)

# manifest.json (docs/records.md); free-form parts (settings, params) are `any` object.
MANIFEST = obj(
    schema_version=COUNT,
    tool=obj(version=OPT_TEXT, git_sha=OPT_TEXT),
    target=obj(
        url=OPT_TEXT,
        server_kind=OPT_TEXT,
        model=OPT_TEXT,
        version=OPT_TEXT,
        server_version=OPT_TEXT,
        batching=_n(mapping(ANY)),
        batching_hash=OPT_TEXT,
        refused_fields=listing(TEXT),
        fields_check=OPT_TEXT,
    ),
    hardware=_n(obj(cpu=OPT_TEXT, cpu_count=OPT_COUNT, gpu=OPT_TEXT, driver=OPT_TEXT)),
    profiles=mapping(
        obj(
            params=_n(mapping(ANY)),
            params_hash=OPT_TEXT,
            overrides=_n(mapping(ANY)),
            aborted_by_gate=OPT_TEXT,
        )
    ),
    profiles_not_run=listing(TEXT),
    gates_file=OPT_TEXT,
    gates_hash=OPT_TEXT,
    gates_not_measurable=mapping(TEXT),
    started_at=OPT_TEXT,
    ended_at=OPT_TEXT,
    scale=OPT_TEXT,
    preset=OPT_TEXT,
    ended=TEXT,
    reason=OPT_TEXT,
)

_STAGE = obj(name=TEXT, start=NUMBER, end=NUMBER)
_BATCH_JOB = obj(
    status=TEXT,
    batch_status=OPT_TEXT,
    http_status=OPT_COUNT,
    error=OPT_TEXT,
    lines_total=OPT_COUNT,
    lines_completed=OPT_COUNT,
    lines_failed=OPT_COUNT,
    output_tokens=OPT_COUNT,
    submit_planned_at=OPT_NUMBER,
    submitted_at=OPT_NUMBER,
    in_progress_at=OPT_NUMBER,
    completed_at=OPT_NUMBER,
    ended_at=OPT_NUMBER,
    polls=OPT_COUNT,
    duration_seconds=OPT_NUMBER,
)
# load.json (docs/records.md).
LOAD = obj(
    schema_version=COUNT,
    profile=TEXT,
    params=mapping(ANY),
    params_hash=OPT_TEXT,
    mode=TEXT,
    workers=COUNT,
    clock=obj(monotonic_at_start=NUMBER, wall_at_start=NUMBER),
    window=obj(start=NUMBER, end=NUMBER, warmup_seconds=OPT_NUMBER),
    stages=listing(_STAGE),
    target_rate_rps=OPT_NUMBER,
    achieved_rate_rps=NUMBER,
    planned_requests=COUNT,
    sent_requests=COUNT,
    counts_by_status=mapping(COUNT),
    chunk_tokens_sources=mapping(COUNT),
    schedule_lag_seconds=mapping(NUMBER),
    client_cpu_ratio=mapping(NUMBER),
    concurrency_cap=COUNT,
    cap_reached_count=COUNT,
    streams_ended_without_done=OPT_COUNT,  # absent in runs before it was counted
    dropped_fields=listing(TEXT),
    limits=mapping(NUMBER),
    measurement_valid=BOOL,
    invalid_reasons=listing(TEXT),
    ended=TEXT,
    batch_job=_BATCH_JOB,
    trace=obj(
        path=OPT_TEXT,
        format=OPT_TEXT,
        requests=COUNT,
        time_scale=OPT_NUMBER,
        duration_seconds=OPT_NUMBER,
        offered_output_tokens_per_second=OPT_NUMBER,
        max_input_tokens=OPT_COUNT,
        max_output_tokens=OPT_COUNT,
        input_clamped=COUNT,
        output_clamped=COUNT,
        output_lengths_exact=BOOL,
    ),
)

_DISTRIBUTION = obj(p50=NUMBER, p90=OPT_NUMBER, n=COUNT)
_PHASE = obj(measurement_valid=BOOL, reasons=listing(TEXT), client_cpu_ratio=_n(mapping(NUMBER)))
# calibration.json (docs/calibration.md).
CALIBRATION = obj(
    schema_version=COUNT,
    identity=mapping(ANY),
    spec=mapping(ANY),
    unloaded=mapping(mapping(_DISTRIBUTION)),
    capacity=mapping(mapping(OPT_NUMBER)),
    kv_capacity=_n(obj(tokens=OPT_NUMBER, source=OPT_TEXT)),
    client=mapping(_n(_PHASE)),
    took_seconds=OPT_NUMBER,
    measured_at=OPT_NUMBER,
    source=OPT_TEXT,
)

_VERDICT = obj(
    gate=TEXT,
    profile=OPT_TEXT,
    status=TEXT,
    metric=TEXT,
    statistic=TEXT,
    unit=TEXT,
    scope=mapping(_n(listing(TEXT))),
    value=OPT_NUMBER,
    threshold=OPT_TEXT,
    threshold_value=OPT_NUMBER,
    margin=OPT_NUMBER,
    n=COUNT,
    interval=_n(listing(OPT_NUMBER)),
    confidence=NUMBER,
    reason=TEXT,
    estimate=BOOL,
    of_total=BOOL,
    monitor=BOOL,
    key=BOOL,
    knob=OPT_TEXT,
    rollback=OPT_TEXT,
    baseline_value=OPT_NUMBER,
    baseline_delta_ratio=OPT_NUMBER,
    reference_value=OPT_NUMBER,
    notes=listing(TEXT),
)
# verdicts.json (docs/report.md).
VERDICTS = obj(
    schema_version=COUNT,
    exit_code=COUNT,
    inconclusive_policy=TEXT,
    confidence=NUMBER,
    run_path=OPT_TEXT,
    gates_file=OPT_TEXT,
    baseline=OPT_TEXT,
    notes=listing(TEXT),
    rollback_target=OPT_TEXT,
    verdicts=listing(_VERDICT),
)
# Keys a verdict must have (`gate.verdicts.verdict.Verdict` has no default for them).
VERDICT_KEYS = ("gate", "profile", "status", "metric", "statistic", "unit", "scope")

_HISTOGRAM = obj(buckets=mapping(NUMBER), sum=NUMBER, count=NUMBER)
# One scrapes.jsonl line: a metric's value is a number, a {class: number} map or a histogram.
SCRAPE = obj(
    t=NUMBER,
    phase=TEXT,
    ok=BOOL,
    error=OPT_TEXT,
    server_kind=OPT_TEXT,
    metrics=mapping(oneof(NUMBER, mapping(NUMBER), _HISTOGRAM)),
    unavailable=listing(TEXT),
)
