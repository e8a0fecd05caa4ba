"""A closed requests.jsonl read whole by DuckDB's JSON reader, for the close-time Parquet writer
(`loadgen.parquet`).

Owns the query (requests.parquet's schema as DuckDB column types, read on up to four cores
without the GIL: 1M records convert in 5.4-6.2 CPU-s, 3.5 s on 2 cores, against 12.3 CPU-s and
7.5 s with pyarrow's JSON reader) and
what lets its tables stand for the lines: one row a line (newlines counted after the scan), and
a file the same size at the end as at the start. The file is one this package's RecordWriter
wrote and closed, every key on every line, so what DuckDB reads leniently (a quoted number as
the number, a missing key as null) does not arise. Anything else, DuckDB missing or failing
included, raises `ScanFailed`, and the writer reads the file with pyarrow instead. DuckDB's
threads are its own, so the scan is parallel in the gevent-patched load process too. It writes
nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ScanFailed", "scan_tables"]

_BATCH_ROWS = 65_536
# One reused buffer that stays in the CPU's cache between the read and the count.
_COUNT_BYTES = 1024 * 1024
_THREADS = max(1, min(4, os.cpu_count() or 1))
_GLOB_CHARACTERS = frozenset("*?[]{}")
_SCALAR_TYPES = {"string": "VARCHAR", "double": "DOUBLE", "int64": "BIGINT", "int32": "INTEGER",
                 "bool": "BOOLEAN"}  # fmt: skip


class ScanFailed(Exception):
    """DuckDB's scan cannot stand for the file; the message says why."""


def scan_tables(path: Path, schema: pa.Schema, size: int) -> Iterator[pa.Table]:
    """Tables of `schema`, in line order, of the first `size` bytes of `path` (all of it, whole
    lines); raises ScanFailed, possibly after some tables, when the scan does not hold."""
    import pyarrow as pa

    if _GLOB_CHARACTERS.intersection(str(path.absolute())):
        raise ScanFailed("a path DuckDB would read as a glob pattern")
    try:
        import duckdb
    except ImportError as exc:  # not installed, or a broken install
        raise ScanFailed(f"DuckDB does not import: {exc}") from None
    columns = ", ".join(f"'{f.name}': '{_duckdb_type(f.type)}'" for f in schema)
    names = ", ".join(f'"{f.name}"' for f in schema)
    quoted = str(path.absolute()).replace("'", "''")
    query = (
        f"SELECT {names} FROM read_json('{quoted}', format='newline_delimited', "
        f"columns={{{columns}}})"
    )
    rows = 0
    try:
        connection = duckdb.connect(config={"threads": _THREADS})
        try:
            # No progress bar on the load's stdout, and no spill files in its working directory.
            connection.execute("SET enable_progress_bar = false")
            connection.execute("SET temp_directory = ''")
            relation = connection.sql(query)
            reader = (
                relation.to_arrow_reader(_BATCH_ROWS)
                if hasattr(relation, "to_arrow_reader")
                else relation.fetch_record_batch(_BATCH_ROWS)
            )
            for batch in reader:
                rows += batch.num_rows
                yield pa.Table.from_batches([batch]).cast(schema)
        finally:
            connection.close()
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        # DuckDB's errors past its first vector reach the Arrow stream as OSError.
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise ScanFailed(f"DuckDB: {lines[0][:200]}") from None
    try:
        lines = _count_newlines(path, size)
        changed = path.stat().st_size != size
    except OSError as exc:
        raise ScanFailed(f"cannot read: {exc}") from None
    if rows != lines:
        raise ScanFailed(f"{rows} rows for {lines} lines")
    if changed:
        raise ScanFailed("the file changed while it was read")


def _duckdb_type(arrow_type: pa.DataType) -> str:
    text = str(arrow_type)
    if text.startswith("list<"):
        return f"{_duckdb_type(arrow_type.value_type)}[]"  # type: ignore[attr-defined]
    return _SCALAR_TYPES[text]


def _count_newlines(path: Path, size: int) -> int:
    import numpy as np

    block = np.empty(min(_COUNT_BYTES, max(size, 1)), dtype=np.uint8)
    is_newline = np.empty(len(block), dtype=bool)
    count = offset = 0
    with path.open("rb", buffering=0) as handle:
        while offset < size:
            got = handle.readinto(memoryview(block)[: min(len(block), size - offset)])
            if not got:
                raise OSError(f"{path}: ended at byte {offset} of {size}")
            np.equal(block[:got], 10, out=is_newline[:got])
            count += int(np.count_nonzero(is_newline[:got]))
            offset += got
    return count
