"""A whole `requests.jsonl` read at once by DuckDB's JSON reader, where that read can stand for
the line-exact one (`gate.rundir.jsonl_records`).

Owns the query (the documented schema as DuckDB column types) and the proof that its tables
are what the lines say: one row a line, no null where a record needs a value, chunk lists of
equal length, finite numbers, categorical values that are text, and for each row with a null
where a record must have the key (DuckDB reads a missing key as null), its line parsed again
and found to be a valid record. Any line DuckDB cannot read or convert, a partial last line, a
path DuckDB would glob, or anything it cannot prove raises `Unproven`; the caller then reads the
file with `JsonlRecords`, which takes what is readable and names the line that is not. It
writes nothing.

Why a second reader: DuckDB parses these records (mostly lists of chunk times) on up to four
cores without the GIL, in less than half the CPU time of pyarrow's JSON reader (1M records,
890 MB: 4.8 s against 12 s on 2 cores). Unlike that reader, DuckDB converts some values of
another JSON type (a quoted number reads as the number); docs/records.md lists them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from gate.rundir.arrow_views import list_values, null_mask, primitive_values
from gate.rundir.jsonl_records import NOT_NULL_FIELDS, record_problem, with_defaults
from gate.rundir.record_schema import NULLABLE_FIELDS, TAIL_BYTES, jsonl_tail, requests_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JsonlScan", "Unproven", "available"]

_BATCH_ROWS = 65_536
_SCAN_BYTES = 1024 * 1024
# DuckDB's threads: its reader scales to every core; more than 4 buys little for one file.
_THREADS = max(1, min(4, os.cpu_count() or 1))
_GLOB_CHARACTERS = frozenset("*?[]{}")
# Text fields of a few values each (id, profile and error are free text).
_CATEGORICAL_TEXT = (
    "stage", "priority", "length_class", "endpoint", "chunk_tokens_source", "tokens_source",
    "status", "finish_reason",
)  # fmt: skip
# How the JSON text of a number, an object or an array begins.
_JSON_STARTS = frozenset("{[-0123456789")
_DUCKDB_TYPES = {
    "string": "VARCHAR",
    "double": "DOUBLE",
    "int64": "BIGINT",
    "int32": "INTEGER",
    "bool": "BOOLEAN",
    "list<item: double>": "DOUBLE[]",
    "list<item: int32>": "INTEGER[]",
}


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
        if _GLOB_CHARACTERS.intersection(str(self.path.absolute())):
            # DuckDB takes a path as a glob pattern: `steady[1]` would read `steady1`.
            raise Unproven("a path DuckDB would read as a glob pattern")
        try:
            size, tail = jsonl_tail(self.path)
        except OSError as exc:
            raise Unproven(f"cannot read: {exc}") from None
        self.bytes_read, self.tail = size, tail[-TAIL_BYTES:]
        last_record = self._last_line_is_record(size, tail)
        doubtful: list[int] = []
        with ThreadPoolExecutor(1, thread_name_prefix="jsonl-lines") as worker:
            # Lines counted beside DuckDB's parse: one row a line is the first proof.
            newlines_future = worker.submit(_newlines, self.path, size)
            rows = 0
            for table in self._scan():
                yield self._checked(table, rows, doubtful)
                rows += table.num_rows
            try:
                newlines = newlines_future.result()
            except OSError as exc:
                raise Unproven(f"cannot read: {exc}") from None
        lines = len(newlines) + (1 if last_record else 0)
        if rows != lines:
            raise Unproven(f"{rows} rows for {lines} lines (blank lines, or a line not read)")
        if _size(self.path) != size:
            raise Unproven("the file changed while it was read")
        self._prove_nulls(doubtful, newlines)

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

    def _scan(self) -> Iterator[pa.Table]:
        import pyarrow as pa

        try:
            import duckdb
        except ImportError as exc:  # installed but broken (a missing shared library)
            raise Unproven(f"DuckDB does not import: {exc}") from None

        schema = requests_schema()
        columns = ", ".join(f"'{f.name}': '{_DUCKDB_TYPES[str(f.type)]}'" for f in schema)
        names = ", ".join(f'"{f.name}"' for f in schema)
        path = str(self.path.absolute()).replace("'", "''")
        # Any line DuckDB cannot read or convert stops it (ignore_errors would turn it into
        # nulls and cost 16 % more CPU): the line-exact reader then names it.
        query = (
            f"SELECT {names} FROM read_json('{path}', format='newline_delimited', "
            f"columns={{{columns}}})"
        )
        try:
            connection = duckdb.connect(config={"threads": _THREADS})
            try:
                # DuckDB draws a progress bar on stdout for a long query: not in our output;
                # and it spills to `.tmp` in the working directory: a read writes nothing.
                connection.execute("SET enable_progress_bar = false")
                connection.execute("SET temp_directory = ''")
                relation = connection.sql(query)
                reader = (
                    relation.to_arrow_reader(_BATCH_ROWS)
                    if hasattr(relation, "to_arrow_reader")
                    else relation.fetch_record_batch(_BATCH_ROWS)
                )
                for batch in reader:
                    yield _as_schema(batch, schema)
            finally:
                connection.close()
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            # Past its first vector DuckDB's errors reach the Arrow stream as OSError;
            # pa.ArrowException: a DuckDB whose Arrow types do not cast to the schema's.
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise Unproven(f"DuckDB: {lines[0][:200]}") from None

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


def _as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_batches([batch]).cast(schema)


def _newlines(path: Path, size: int) -> np.ndarray:
    """Byte offsets of the newlines in the first `size` bytes (numpy: without the GIL; 8 bytes
    a line, kept so that a doubtful row's line is found without reading the file again).

    Read block by block into one reused buffer that stays in the CPU's cache between the read
    and the search: a fresh 32 MiB block per read cost 1.4-1.8 CPU-s for 850 MB, this 0.3."""
    parts = [np.zeros(0, dtype=np.intp)]
    block = np.empty(min(_SCAN_BYTES, max(size, 1)), dtype=np.uint8)
    is_newline = np.empty(len(block), dtype=bool)
    with path.open("rb", buffering=0) as handle:
        offset = 0
        while offset < size:
            count = handle.readinto(memoryview(block)[: min(len(block), size - offset)])
            if not count:
                raise OSError(f"{path}: ended at byte {offset} of {size}")
            np.equal(block[:count], 10, out=is_newline[:count])
            parts.append(np.flatnonzero(is_newline[:count]) + offset)
            offset += count
    return np.concatenate(parts)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
