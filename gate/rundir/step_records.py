"""Server step records (`steps.jsonl`, docs/records.md) as numpy columns, and `steps.parquet`,
the gate's columnar copy of them.

Owns `StepColumns` and `read_steps`: the fields the gate reads as float64 (NaN for null or
missing), the per-class gauges (`num_waiting`, `num_running`; a class a record lacks counts 0),
and the count of records missed (jumps in `seq`). A whole file is read from `steps.parquet` when
its stamp matches the JSONL; else the JSONL is parsed by pyarrow's JSON reader (on every core)
when its table is plainly what the lines say, otherwise line by line (`read_jsonl`, exact, with
its notes and errors), and the Parquet copy is written for the next read. A prefix view (the
first `limit` lines) is always parsed exactly. It does not know metrics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from batchgate_records.schema import jsonl_stamp, jsonl_tail
from gate.rundir.arrow_views import float64_array, float_values
from gate.rundir.observer_records import RunDirError, read_jsonl
from gate.rundir.parquet_copy import copy_path, read_copy, unreadable_note, write_copy

__all__ = ["STEPS_SCHEMA_NAME", "STEP_FIELDS", "StepColumns", "read_steps", "steps_parquet_path"]

STEPS_SCHEMA_NAME = "batchgate.steps"
STEPS_SCHEMA_VERSION = 1
STEP_FIELDS = (
    "t",
    "duration_seconds",
    "num_prefill_tokens",
    "num_recomputed_tokens",
    "num_preemptions",
    "num_kv_blocks_used",
    "num_kv_blocks_total",
)
_GAUGES = ("num_waiting", "num_running")
# pyarrow cuts the file into pieces this size and parses them on every core.
_PARSE_BLOCK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class StepColumns:
    """steps.jsonl as arrays (`t` is wall-clock seconds); per-class gauges keyed by class."""

    t: np.ndarray
    duration_seconds: np.ndarray
    num_prefill_tokens: np.ndarray
    num_recomputed_tokens: np.ndarray
    num_preemptions: np.ndarray
    num_kv_blocks_used: np.ndarray
    num_kv_blocks_total: np.ndarray
    num_waiting: dict[str, np.ndarray]
    num_running: dict[str, np.ndarray]
    missed_records: int = 0


def steps_parquet_path(jsonl_path: Path) -> Path:
    return copy_path(jsonl_path)


def read_steps(path: Path, notes: list[str], limit: int | None = None) -> StepColumns | None:
    """steps.jsonl's columns (None without the file); `limit`: its first that-many lines."""
    if not path.exists():
        return None
    if limit is not None:
        return _with_missed(*_from_records(path, read_jsonl(path, notes, limit) or []), notes)
    size, tail = jsonl_tail(path)
    cached = _read_parquet(path, notes)
    if cached is not None:
        return _with_missed(*cached, notes)
    parsed = _parse_fast(path)
    if parsed is None:
        seen = len(notes)
        parsed = _from_records(path, read_jsonl(path, notes) or [])
        if len(notes) > seen:  # a partial last line: the file is still being written
            return _with_missed(*parsed, notes)
    stamp = jsonl_stamp(
        size, tail, partial_last_line=False, schema=STEPS_SCHEMA_NAME, version=STEPS_SCHEMA_VERSION
    )
    _write_parquet(path, *parsed, stamp)
    return _with_missed(*parsed, notes)


_get_step_fields = itemgetter(*STEP_FIELDS)


def _column(rows: list[dict[str, Any]], key: str, *, missing: float = np.nan) -> np.ndarray:
    # itemgetter in C when every row has the key (the usual case), .get otherwise.
    try:
        values = list(map(itemgetter(key), rows))
    except KeyError:
        values = [r.get(key, missing) for r in rows]
    return np.array(values, dtype=np.float64)


# What each reader hands on: the columns (missed_records still 0) and the `seq` column.
_Parsed = tuple[StepColumns, np.ndarray]


def _from_records(path: Path, records: list[dict[str, Any]]) -> _Parsed:
    try:
        try:
            rows = list(map(_get_step_fields, records))
        except KeyError:
            rows = [tuple(r.get(k) for k in STEP_FIELDS) for r in records]
        table = np.array(rows, dtype=np.float64).reshape(len(records), len(STEP_FIELDS))
    except (TypeError, ValueError) as exc:
        raise RunDirError(
            _not_a_number(path, rows) or f"{path}: step fields must be numbers: {exc}"
        ) from None
    # numpy reads true/false as 1/0: a boolean is no step count or time.
    wrong = _not_a_number(path, rows)
    if wrong is not None:
        raise RunDirError(wrong)
    per_class: dict[str, dict[str, np.ndarray]] = {}
    for key in _GAUGES:
        try:
            gauges = list(map(itemgetter(key), records))
        except KeyError:
            gauges = [r.get(key) for r in records]
        if not all(gauges):
            gauges = [g or {} for g in gauges]
        _check_gauges(path, key, gauges)
        classes = sorted(set().union(*gauges))
        per_class[key] = {c: _column(gauges, c, missing=0.0) for c in classes}
    columns = StepColumns(
        **{name: table[:, i] for i, name in enumerate(STEP_FIELDS)},
        num_waiting=per_class["num_waiting"],
        num_running=per_class["num_running"],
    )
    try:
        if any(type(r.get("seq")) is bool for r in records):
            raise TypeError("a boolean")
        seq = _column(records, "seq")
    except (TypeError, ValueError):
        raise RunDirError(f"{path}: seq: step records must number their steps") from None
    return columns, seq


def _not_a_number(path: Path, rows: list[tuple[Any, ...]]) -> str | None:
    """`file: record N: field: expected a number, got ...` for the first step field that is
    not a number or null (a boolean too: numpy would read it as 1 or 0)."""
    if set(map(type, chain.from_iterable(rows))) <= {int, float, type(None)}:
        return None  # the usual file: one pass in C
    for number, row in enumerate(rows, start=1):
        for field, value in zip(STEP_FIELDS, row, strict=True):
            if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
                continue
            got = (
                "a boolean" if isinstance(value, bool) else f"{type(value).__name__} {value!r:.40}"
            )
            return f"{path}: record {number}: {field}: expected a number, got {got}"
    return None


def _check_gauges(path: Path, key: str, gauges: list[Any]) -> None:
    """Each record's `num_waiting` / `num_running` is a {class: number} object."""
    for number, gauge in enumerate(gauges, start=1):
        good = isinstance(gauge, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in gauge.values()
        )
        if not good:
            raise RunDirError(
                f"{path}: record {number}: {key}: expected an object of numbers per class"
            )


def _with_missed(columns: StepColumns, seq: np.ndarray, notes: list[str]) -> StepColumns:
    gaps = np.diff(seq[~np.isnan(seq)])
    missed = int(np.sum(gaps[gaps > 1] - 1)) if len(gaps) else 0
    if missed:
        notes.append(f"steps.jsonl: {missed} step records missed (server ring buffer overflowed)")
    return dataclasses.replace(columns, missed_records=missed)


def _parse_fast(path: Path) -> _Parsed | None:
    """The columns through pyarrow's JSON reader, or None when its table may not be what the
    exact reader makes of the lines (then the caller parses line by line)."""
    import pyarrow as pa
    import pyarrow.json as pj

    f8 = pa.float64()
    schema = pa.schema([("seq", f8), *((name, f8) for name in STEP_FIELDS)])
    try:
        table = pj.read_json(
            path,
            read_options=pj.ReadOptions(use_threads=True, block_size=_PARSE_BLOCK_BYTES),
            # The gauges' classes are the records' own keys: inferred as struct fields.
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
    except (pa.ArrowException, OSError):
        return None  # a partial last line, a bool or string where a number belongs, ...
    gauges: dict[str, dict[str, np.ndarray]] = {}
    for key in _GAUGES:
        gauges[key] = {}
        if key not in table.column_names:
            continue
        column = table.column(key).combine_chunks()
        # A record without the map, or a class null in one, is where the exact reader's
        # missing-means-0 and null-means-NaN would differ from a null here: go line by line.
        if not pa.types.is_struct(column.type) or column.null_count:
            return None
        for index in range(column.type.num_fields):
            child = column.field(index)
            if child.null_count or not (
                pa.types.is_integer(child.type) or pa.types.is_floating(child.type)
            ):
                return None
            gauges[key][column.type.field(index).name] = float_values(child.cast(f8))
    values = {name: float_values(table.column(name).combine_chunks()) for name in schema.names}
    columns = StepColumns(
        **{name: values[name] for name in STEP_FIELDS},
        num_waiting=dict(sorted(gauges["num_waiting"].items())),
        num_running=dict(sorted(gauges["num_running"].items())),
    )
    return columns, values["seq"]


def _read_parquet(jsonl: Path, notes: list[str]) -> _Parsed | None:
    table = read_copy(jsonl, schema=STEPS_SCHEMA_NAME, version=STEPS_SCHEMA_VERSION, notes=notes)
    if table is None:
        return None
    import pyarrow as pa

    try:
        columns = {
            name: float_values(table.column(name).combine_chunks()) for name in table.column_names
        }
        per_class = {
            key: {n.split(".", 1)[1]: v for n, v in columns.items() if n.startswith(f"{key}.")}
            for key in _GAUGES
        }
        steps = StepColumns(
            **{name: columns[name] for name in STEP_FIELDS},
            num_waiting=per_class["num_waiting"],
            num_running=per_class["num_running"],
        )
        return steps, columns["seq"]
    except (pa.ArrowException, KeyError, ValueError) as exc:  # decoded, but not our columns
        notes.append(unreadable_note(copy_path(jsonl), jsonl, exc))
        return None


def _write_parquet(
    jsonl: Path, columns: StepColumns, seq: np.ndarray, stamp: dict[bytes, bytes]
) -> None:
    """steps.parquet: `seq` (NaN where a record had none), the step fields and one column per
    gauge class (`num_waiting.<class>`), all float64."""
    import pyarrow as pa

    arrays = {"seq": seq, **{name: getattr(columns, name) for name in STEP_FIELDS}}
    for key in _GAUGES:
        arrays.update({f"{key}.{c}": v for c, v in getattr(columns, key).items()})
    try:
        table = pa.table({name: float64_array(values) for name, values in arrays.items()})
    except pa.ArrowException:  # as a failed write: only the next read's speed is lost
        return
    write_copy(jsonl, table, stamp)
