"""DuckDB's read of a whole `requests.jsonl` into tables of requests.parquet's schema, for the load
generator's close-time Parquet writer (`loadgen.parquet`) and the gate's reader
(`gate.rundir.jsonl_scan`).

Owns the query (the schema as DuckDB column types), DuckDB's settings for it (no progress bar on
stdout, no spill files in the working directory), the refusal of a path DuckDB would read as a
glob pattern, and the proof every caller needs that the tables stand for the lines: one row a
line (the newlines counted, after the read or beside it) and a file the same size at the end as
at the start. Anything else that fails (DuckDB missing or broken, a line it cannot read or
convert) raises `ScanFailed`, possibly after some tables; the caller then reads the file its own
way. It writes nothing.

Why DuckDB: it parses these records (mostly lists of chunk times) on up to four cores without the
GIL, in less than half the CPU time of pyarrow's JSON reader (1M records, 890 MB: 4.8 CPU-s
against 12 on 2 cores; the writer's whole conversion 5.4-6.2 CPU-s against 12.3), and its
threads are its own, so the read is parallel in the gevent-patched load process too. It is
lenient where the line-exact readers are not (a quoted number reads as the number, a missing key
as null): a file this package's writer closed never holds such lines; what a file of unknown
origin needs proven beyond one row a line is the gate's (`gate.rundir.jsonl_scan`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["LineScan", "ScanFailed", "newline_offsets"]

_BATCH_ROWS = 65_536
# One reused buffer that stays in the CPU's cache between the read and the search: a fresh
# 32 MiB block per read cost 1.4-1.8 CPU-s for 850 MB, this 0.3.
_BLOCK_BYTES = 1024 * 1024
# DuckDB's threads: its reader scales to every core; more than 4 buys little for one file.
_THREADS = max(1, min(4, os.cpu_count() or 1))
_GLOB_CHARACTERS = frozenset("*?[]{}")
_SCALAR_TYPES = {"string": "VARCHAR", "double": "DOUBLE", "int64": "BIGINT", "int32": "INTEGER",
                 "bool": "BOOLEAN"}  # fmt: skip


class ScanFailed(Exception):
    """DuckDB's read cannot stand for the file's lines; the message says why."""


class LineScan:
    """One DuckDB read of the first `size` bytes of `path` (whole lines; with
    `ends_in_record`, a last record without its newline as well): `tables()` yields tables of
    `schema` in line order, then proves one row a line and the file unchanged, else raises
    `ScanFailed`. With `count_beside`, the newlines are counted in a thread while DuckDB parses
    (not in the gevent-patched load process, whose threads are greenlets); afterwards
    `newlines` holds their byte offsets, so a caller finds a row's line without reading the
    file again."""

    def __init__(
        self,
        path: Path,
        schema: pa.Schema,
        size: int,
        *,
        ends_in_record: bool = False,
        count_beside: bool = False,
    ) -> None:
        self.path = path
        self.schema = schema
        self.size = size
        self.ends_in_record = ends_in_record
        self.count_beside = count_beside
        self.newlines: np.ndarray | None = None

    def tables(self) -> Iterator[pa.Table]:
        if _GLOB_CHARACTERS.intersection(str(self.path.absolute())):
            # DuckDB takes a path as a glob pattern: `steady[1]` would read `steady1`.
            raise ScanFailed("a path DuckDB would read as a glob pattern")
        rows = 0
        if self.count_beside:
            with ThreadPoolExecutor(1, thread_name_prefix="jsonl-lines") as worker:
                counted = worker.submit(newline_offsets, self.path, self.size)
                for table in _duckdb_tables(self.path, self.schema):
                    yield table
                    rows += table.num_rows
                newlines = _read(counted.result)
        else:
            for table in _duckdb_tables(self.path, self.schema):
                yield table
                rows += table.num_rows
            newlines = _read(lambda: newline_offsets(self.path, self.size))
        lines = len(newlines) + (1 if self.ends_in_record else 0)
        if rows != lines:
            raise ScanFailed(f"{rows} rows for {lines} lines (blank lines, or a line not read)")
        if _size(self.path) != self.size:
            raise ScanFailed("the file changed while it was read")
        self.newlines = newlines


def newline_offsets(path: Path, size: int) -> np.ndarray:
    """Byte offsets of the newlines in the first `size` bytes of `path` (numpy: without the GIL;
    8 bytes a line); OSError when the file holds fewer bytes."""
    import numpy as np

    parts = [np.zeros(0, dtype=np.intp)]
    block = np.empty(min(_BLOCK_BYTES, max(size, 1)), dtype=np.uint8)
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


def _duckdb_tables(path: Path, schema: pa.Schema) -> Iterator[pa.Table]:
    import pyarrow as pa

    try:
        import duckdb
    except ImportError as exc:  # not installed, or installed but broken (a missing library)
        raise ScanFailed(f"DuckDB does not import: {exc}") from None
    columns = ", ".join(f"'{f.name}': '{_duckdb_type(f.type)}'" for f in schema)
    names = ", ".join(f'"{f.name}"' for f in schema)
    quoted = str(path.absolute()).replace("'", "''")
    # Any line DuckDB cannot read or convert stops it (ignore_errors would turn it into nulls
    # and cost 16 % more CPU): the caller's own reader then reads the file.
    query = (
        f"SELECT {names} FROM read_json('{quoted}', format='newline_delimited', "
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
                yield pa.Table.from_batches([batch]).cast(schema)
        finally:
            connection.close()
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        # Past its first vector DuckDB's errors reach the Arrow stream as OSError;
        # pa.ArrowException: a DuckDB whose Arrow types do not cast to the schema's.
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise ScanFailed(f"DuckDB: {lines[0][:200]}") from None


def _duckdb_type(arrow_type: pa.DataType) -> str:
    text = str(arrow_type)
    if text.startswith("list<"):
        return f"{_duckdb_type(arrow_type.value_type)}[]"  # type: ignore[attr-defined]
    return _SCALAR_TYPES[text]


def _read(count: Callable[[], np.ndarray]) -> np.ndarray:
    try:
        return count()
    except OSError as exc:
        raise ScanFailed(f"cannot read: {exc}") from None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
