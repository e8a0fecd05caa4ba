"""A whole `requests.jsonl` read at once by DuckDB (`batchgate_records.scan`), where that read
can stand for the line-exact one (`gate.rundir.jsonl_records`).

Owns the proof that a file of unknown origin needs beyond the shared scan's one row a line:
no null where a record needs a value, chunk lists of equal length, finite numbers, categorical
values that are text, and for each row with a null where a record must have the key (DuckDB
reads a missing key as null), its line parsed again and found to be a valid record. Any line
DuckDB cannot read or convert, a partial last line, a path DuckDB would glob, or anything it
cannot prove raises `Unproven`; the caller then reads the file with `JsonlRecords`, which takes
what is readable and names the line that is not. It writes nothing.

Why a second reader: DuckDB parses these records on up to four cores without the GIL, in less
than half the CPU time of pyarrow's JSON reader (1M records, 890 MB: 4.8 s against 12 s on 2
cores). Unlike that reader, DuckDB converts some values of another JSON type (a quoted number
reads as the number); docs/records.md lists them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from batchgate_records.scan import LineScan, ScanFailed
from batchgate_records.schema import (
    NULLABLE_FIELDS,
    TAIL_BYTES,
    jsonl_tail,
    requests_schema,
    with_defaults,
)
from gate.rundir.arrow_views import list_values, null_mask, primitive_values
from gate.rundir.jsonl_records import NOT_NULL_FIELDS, record_problem

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JsonlScan", "Unproven", "available"]

# Text fields of a few values each (id, profile and error are free text).
_CATEGORICAL_TEXT = (
    "stage", "priority", "length_class", "endpoint", "chunk_tokens_source", "tokens_source",
    "status", "finish_reason",
)  # fmt: skip
# How the JSON text of a number, an object or an array begins.
_JSON_STARTS = frozenset("{[-0123456789")


class Unproven(Exception):
    """The scan cannot stand for the line-exact reader; the message says why."""


def available() -> bool:
    """Whether DuckDB is installed (it is a dependency; a stripped install reads without it)."""
    return importlib.util.find_spec("duckdb") is not None


class JsonlScan:
    """One scan of a whole requests.jsonl: `tables()` yields tables of requests.parquet's schema
    (defaults filled) or raises `Unproven`; afterwards `bytes_read`, `tail` and
    `partial_last_line` (always False: a partial line is left to the line-exact reader) describe
    what was read, as `JsonlRecords`' do."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bytes_read = 0
        self.tail = b""
        self.partial_last_line = False

    def tables(self) -> Iterator[pa.Table]:
        try:
            size, tail = jsonl_tail(self.path)
        except OSError as exc:
            raise Unproven(f"cannot read: {exc}") from None
        self.bytes_read, self.tail = size, tail[-TAIL_BYTES:]
        ends_in_record = self._last_line_is_record(size, tail)
        # Lines counted beside DuckDB's parse: one row a line is the first proof.
        scan = LineScan(
            self.path, requests_schema(), size, ends_in_record=ends_in_record, count_beside=True
        )
        doubtful: list[int] = []
        rows = 0
        try:
            for table in scan.tables():
                yield self._checked(table, rows, doubtful)
                rows += table.num_rows
        except ScanFailed as exc:
            raise Unproven(str(exc)) from None
        assert scan.newlines is not None  # set once every table is proven
        self._prove_nulls(doubtful, scan.newlines)

    def _last_line_is_record(self, size: int, tail: bytes) -> bool:
        """Whether the file ends in a record without a newline (else in a newline or a blank)."""
        if size == 0 or tail.endswith(b"\n"):
            return False
        cut = tail.rfind(b"\n")
        if cut < 0 and size > len(tail):
            raise Unproven("a last line longer than the tail read")
        last = tail[cut + 1 :]
        if not last.strip():
            return False
        try:
            orjson.loads(last)
        except orjson.JSONDecodeError:
            # A writer killed mid-line: the line-exact reader skips that line and says so.
            raise Unproven("a partial last line") from None
        return True

    def _checked(self, table: pa.Table, first_row: int, doubtful: list[int]) -> pa.Table:
        """`table` with defaults filled, once what one table can show is proven; rows with a
        null where a record must have the key are noted in `doubtful` (their lines are read at
        the end: DuckDB reads a missing key as null)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if any(table.column(name).null_count for name in NOT_NULL_FIELDS):
            raise Unproven("a record without a value it needs")
        times, tokens = table.column("chunk_times"), table.column("chunk_tokens")
        if not pc.all(pc.equal(pc.list_value_length(times), pc.list_value_length(tokens))).as_py():
            raise Unproven("chunk lists of different lengths")
        # DuckDB reads NaN, Infinity and 1e400 (not JSON, or not a finite double) where the
        # line-exact reader refuses the line; no writer makes them.
        doubles = [table.column(f.name) for f in table.schema if f.type == pa.float64()]
        for chunk in (c for column in doubles for c in column.chunks):
            values = primitive_values(chunk)[~null_mask(chunk)]
            if not np.isfinite(values).all():
                raise Unproven("a number that is not finite")
        for chunk in times.chunks:
            if not np.isfinite(list_values(chunk)).all():
                raise Unproven("a chunk time that is not finite")
        for name in _CATEGORICAL_TEXT:
            # DuckDB turns a number, a boolean, an object or an array into its JSON text where
            # the line-exact reader refuses it: a categorical value that reads as such is left
            # to that reader (a quoted "true" as well: it costs only the fast read).
            for value in pc.unique(table.column(name)).to_pylist():
                if value is not None and _json_not_text(value):
                    raise Unproven(f"{name} {value!r} may not have been text")
        masks = [null_mask(table.column(n).combine_chunks())
                 for n in NULLABLE_FIELDS if table.column(n).null_count]  # fmt: skip
        if masks:
            rows = np.flatnonzero(np.logical_or.reduce(masks)) + first_row
            doubtful.extend(rows.tolist())
        return with_defaults(table)

    def _prove_nulls(self, doubtful: list[int], newlines: np.ndarray) -> None:
        """Each doubtful row's line must be a valid record (every required key there)."""
        if not doubtful:
            return
        with self.path.open("rb") as handle:
            fd = handle.fileno()
            for row in doubtful:
                start = int(newlines[row - 1]) + 1 if row else 0
                end = int(newlines[row]) if row < len(newlines) else self.bytes_read
                try:
                    obj = orjson.loads(os.pread(fd, end - start, start))
                except orjson.JSONDecodeError:
                    raise Unproven(f"row {row}: its line is not JSON") from None
                if record_problem(obj) is not None:
                    raise Unproven(f"row {row}: not a valid record")


def _json_not_text(value: str) -> bool:
    """Whether `value` is the JSON text of something other than a string."""
    if value[:1] not in _JSON_STARTS and value not in ("true", "false", "null"):
        return False
    try:
        return not isinstance(orjson.loads(value), str)
    except orjson.JSONDecodeError:
        return False
