"""A whole `requests.jsonl` read at once by DuckDB's JSON reader, where that read can stand for
the line-exact one (`gate.rundir.jsonl_records`).

Owns the query (the documented schema as DuckDB column types) and the proof that its tables
are what the lines say: one row a line, no null where a record needs a value, chunk lists of
equal length, and for each row with a null where a record must have the key (DuckDB reads a
missing key as null), its line parsed again and found to be a valid record. Any line DuckDB
cannot read or convert, a partial last line, or anything it cannot prove raises `Unproven`; the
caller then reads the file with `JsonlRecords`, which takes what is readable and names the line
that is not. It writes nothing.

Why a second reader: DuckDB parses these records (mostly lists of chunk times) on every core
without the GIL in less than half the CPU time of pyarrow's JSON reader (1M records, 890 MB:
4.8 s against 12 s on 2 cores). Unlike that reader, DuckDB converts a value of another JSON type
where it can (a quoted number reads as the number); docs/records.md says so.
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

from gate.rundir.arrow_views import null_mask
from gate.rundir.jsonl_records import NOT_NULL_FIELDS, record_problem, with_defaults
from gate.rundir.record_schema import NULLABLE_FIELDS, TAIL_BYTES, jsonl_tail, requests_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JsonlScan", "Unproven", "available"]

_BATCH_ROWS = 65_536
_SCAN_BYTES = 32 * 1024 * 1024
# DuckDB's threads: its reader scales to every core; more than 4 buys little for one file.
_THREADS = max(1, min(4, os.cpu_count() or 1))
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
            newlines = newlines_future.result()
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
        path = str(self.path).replace("'", "''")
        # Any line DuckDB cannot read or convert stops it (ignore_errors would turn it into
        # nulls and cost 16 % more CPU): the line-exact reader then names it.
        query = (
            f"SELECT {names} FROM read_json('{path}', format='newline_delimited', "
            f"columns={{{columns}}})"
        )
        try:
            connection = duckdb.connect(config={"threads": _THREADS})
            try:
                # DuckDB draws a progress bar on stdout for a long query: not in our output.
                connection.execute("SET enable_progress_bar = false")
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
        except (duckdb.Error, pa.ArrowException) as exc:
            # pa.ArrowException: a DuckDB whose Arrow types do not cast to the schema's.
            raise Unproven(f"DuckDB: {str(exc).strip().splitlines()[0][:200]}") from None

    def _checked(self, table: pa.Table, first_row: int, doubtful: list[int]) -> pa.Table:
        """`table` with defaults filled, once what one table can show is proven; rows with a
        null where a record must have the key are noted in `doubtful` (their lines are read at
        the end: DuckDB reads a missing key as null)."""
        import pyarrow.compute as pc

        if any(table.column(name).null_count for name in NOT_NULL_FIELDS):
            raise Unproven("a record without a value it needs")
        times, tokens = table.column("chunk_times"), table.column("chunk_tokens")
        if not pc.all(pc.equal(pc.list_value_length(times), pc.list_value_length(tokens))).as_py():
            raise Unproven("chunk lists of different lengths")
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


def _as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_batches([batch]).cast(schema)


def _newlines(path: Path, size: int) -> np.ndarray:
    """Byte offsets of the newlines in the first `size` bytes (numpy: without the GIL; 8 bytes
    a line, kept so that a doubtful row's line is found without reading the file again)."""
    parts = [np.zeros(0, dtype=np.intp)]
    with path.open("rb") as handle:
        for offset in range(0, size, _SCAN_BYTES):
            data = handle.read(min(_SCAN_BYTES, size - offset))
            parts.append(np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + offset)
    return np.concatenate(parts)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
