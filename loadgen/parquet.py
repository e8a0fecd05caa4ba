"""`requests.parquet`, the columnar copy of `requests.jsonl` (docs/records.md), on the writer's
side.

Owns converting a closed requests.jsonl into requests.parquet with pyarrow, in the format
`batchgate_records.schema` defines for the writer and the gate alike (every record field, chunk
times and tokens as list columns, the schema name and version, and the stamp by which a reader
knows the file still stands for the JSONL). The conversion streams the JSONL (read by DuckDB,
`batchgate_records.scan`, else by pyarrow's JSON reader in blocks; bounded memory either way),
writes a temporary file and renames it, so a reader never sees half a file; any failure leaves no
Parquet (readers then parse the JSONL, the source of truth, and write it themselves).
`validate_parquet` checks a file against docs/records.md and its JSONL, for the tests. pyarrow is
imported when converting, not at import: the load process needs it only at its clean close.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from batchgate_records.scan import LineScan, ScanFailed
from batchgate_records.schema import (
    META_JSONL_BYTES,
    META_JSONL_TAIL_SHA256,
    META_SCHEMA,
    META_SCHEMA_VERSION,
    OPTIONAL_DEFAULTS,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    TAIL_BYTES,
    jsonl_stamp,
    jsonl_tail,
    parquet_path,
    requests_schema,
    with_defaults,
    write_options,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["validate_parquet", "write_parquet"]

_BLOCK_BYTES = 32 * 1024 * 1024
_PARSE_BLOCK_BYTES = 4 * 1024 * 1024


def write_parquet(jsonl_path: str | Path) -> Path | None:
    """Write requests.parquet beside a closed `jsonl_path`; None (and no file) when it cannot.

    The lines are read by DuckDB (`batchgate_records.scan`: half the CPU time for 1M records)
    where its read holds, else by pyarrow's JSON reader block by block."""
    import pyarrow as pa

    jsonl_path = Path(jsonl_path)
    target = parquet_path(jsonl_path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        size, tail = jsonl_tail(jsonl_path)
        if size and not tail.endswith(b"\n"):
            return _discard(temporary)  # a last line without newline: not closed
        schema = requests_schema()
        try:
            _write(temporary, LineScan(jsonl_path, schema, size).tables(), size, tail)
        except ScanFailed:
            _write(temporary, _parsed_tables(jsonl_path, schema, size), size, tail)
        os.replace(temporary, target)
    except (OSError, pa.ArrowException, _NotWholeLines):
        return _discard(temporary)
    return target


class _NotWholeLines(Exception):
    """A line longer than a read block, or a file that shrank: not one the writer closed."""


def _write(temporary: Path, tables: Iterator[pa.Table], size: int, tail: bytes) -> None:
    """The tables, defaults filled, into `temporary` with the schema name, version and stamp."""
    import pyarrow.parquet as pq

    stamp = jsonl_stamp(size, tail, partial_last_line=False)
    header = {key: stamp[key] for key in (META_SCHEMA, META_SCHEMA_VERSION)}
    schema = requests_schema().with_metadata(header)
    with pq.ParquetWriter(temporary, schema, **write_options()) as writer:
        for table in tables:
            writer.write_table(with_defaults(table))
        writer.add_key_value_metadata(stamp)


def _parsed_tables(jsonl_path: Path, schema: pa.Schema, size: int) -> Iterator[pa.Table]:
    """The first `size` bytes (whole lines) through pyarrow's JSON reader, a block at a time."""
    import pyarrow as pa
    import pyarrow.json as pj

    read_options = pj.ReadOptions(use_threads=True, block_size=_PARSE_BLOCK_BYTES)
    parse_options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    with jsonl_path.open("rb") as handle:
        offset = 0
        while offset < size:
            data = handle.read(min(_BLOCK_BYTES, size - offset))
            end = data.rfind(b"\n") + 1
            if end == 0:
                raise _NotWholeLines
            yield pj.read_json(
                pa.py_buffer(memoryview(data)[:end]),
                read_options=read_options,
                parse_options=parse_options,
            )
            offset += end
            handle.seek(offset)


def _discard(temporary: Path) -> None:
    temporary.unlink(missing_ok=True)
    return None


def validate_parquet(jsonl_path: str | Path) -> list[str]:
    """Problems of requests.parquet against docs/records.md and the JSONL beside it: the schema,
    the metadata, the stamp, and row i equal to line i; empty when valid."""
    import orjson
    import pyarrow.parquet as pq

    jsonl_path = Path(jsonl_path)
    try:
        table = pq.read_table(parquet_path(jsonl_path))
        meta = pq.read_metadata(parquet_path(jsonl_path)).metadata or {}
    except (OSError, ValueError) as exc:
        return [f"requests.parquet unreadable: {exc}"]
    problems = []
    if not table.schema.remove_metadata().equals(requests_schema()):
        problems.append(f"schema differs from docs/records.md: {table.schema}")
    if meta.get(META_SCHEMA) != SCHEMA_NAME.encode():
        problems.append("metadata batchgate.schema is not batchgate.requests")
    if meta.get(META_SCHEMA_VERSION) != str(SCHEMA_VERSION).encode():
        problems.append(f"metadata batchgate.schema_version is not {SCHEMA_VERSION}")
    data = jsonl_path.read_bytes()
    if meta.get(META_JSONL_BYTES) != str(len(data)).encode():
        problems.append("stamp jsonl_bytes differs from the JSONL's byte size")
    digest = hashlib.sha256(data[-TAIL_BYTES:]).hexdigest().encode()
    if meta.get(META_JSONL_TAIL_SHA256) != digest:
        problems.append("stamp jsonl_tail_sha256 differs from the JSONL's last 64 KiB")
    lines = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    if table.num_rows != len(lines):
        problems.append(f"{table.num_rows} rows for {len(lines)} JSONL lines")
        return problems
    names = requests_schema().names
    for number, (row, line) in enumerate(zip(table.to_pylist(), lines, strict=True), start=1):
        expected = {name: line.get(name, OPTIONAL_DEFAULTS.get(name)) for name in names}
        if row != expected:
            problems.append(f"row {number - 1} differs from line {number}")
            break
    return problems
