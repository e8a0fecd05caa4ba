"""`requests.parquet`, the columnar copy of `requests.jsonl` (docs/records.md), on the writer's
side.

Owns converting a closed requests.jsonl into requests.parquet with pyarrow: the documented schema
(every record field, chunk times and tokens as list columns), the schema name and version, and the
stamp (the JSONL's byte size and a SHA-256 of its last 64 KiB) by which a reader knows the file
still stands for the JSONL. The conversion streams the JSONL (read by DuckDB, `loadgen.jsonl_scan`,
else by pyarrow's JSON reader in blocks; bounded memory either way), writes a temporary file and
renames it, so a reader never sees half a file; any failure leaves no Parquet
(readers then parse the JSONL, the source of truth, and write it themselves). `validate_parquet`
checks a file against docs/records.md and its JSONL, for the tests. pyarrow is imported
when converting, not at import: the load process needs it only at its clean close. The gate reads
these files with its own code (`gate.rundir.request_parquet`); tests pin that both sides agree
with docs/records.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.jsonl_scan import ScanFailed, scan_tables

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "parquet_path",
    "requests_schema",
    "validate_parquet",
    "write_parquet",
]

SCHEMA_NAME = "batchgate.requests"
SCHEMA_VERSION = 1
TAIL_BYTES = 64 * 1024
_BLOCK_BYTES = 32 * 1024 * 1024
_PARSE_BLOCK_BYTES = 4 * 1024 * 1024
# Older records lack these; the Parquet holds the value such a record meant (docs/records.md).
_DEFAULTS = {"endpoint": "chat", "chunk_tokens_source": "assumed"}


def parquet_path(jsonl_path: str | Path) -> Path:
    path = Path(jsonl_path)
    return path.with_name(f"{path.stem}.parquet")


def requests_schema() -> pa.Schema:
    """requests.parquet's columns, in the JSONL's field order (docs/records.md)."""
    import pyarrow as pa

    text, f8, i8 = pa.string(), pa.float64(), pa.int64()
    return pa.schema(
        [
            ("id", text),
            ("profile", text),
            ("stage", text),
            ("priority", text),
            ("length_class", text),
            ("endpoint", text),
            ("stream", pa.bool_()),
            ("max_tokens", i8),
            ("planned_at", f8),
            ("sent_at", f8),
            ("first_token_at", f8),
            ("done_at", f8),
            ("chunk_times", pa.list_(f8)),
            ("chunk_tokens", pa.list_(pa.int32())),
            ("chunk_tokens_source", text),
            ("prompt_tokens", i8),
            ("output_tokens", i8),
            ("tokens_source", text),
            ("status", text),
            ("http_status", pa.int32()),
            ("finish_reason", text),
            ("error", text),
            ("worker", i8),
            ("cached_tokens", i8),
            ("session", text),
            ("turn", i8),
            ("trace_index", i8),
            ("first_reasoning_at", f8),
            ("first_content_at", f8),
            ("reasoning_tokens", i8),
            ("probe", i8),
            ("probe_answer", text),
        ]
    )


def _write_options() -> dict[str, object]:
    # As the gate's `gate.rundir.record_schema.write_options` (why there): dictionary pages for
    # strings but `id` and for token counts, chunk_times uncompressed (they hardly compress;
    # reading is faster) and without statistics (nothing reads them; the gate reads chunk_tokens').
    schema = requests_schema()
    strings = [f.name for f in schema if str(f.type) == "string" and f.name != "id"]
    leaves = [f"{f.name}.list.element" if str(f.type).startswith("list") else f.name
              for f in schema]  # fmt: skip
    return {
        "use_dictionary": [*strings, "chunk_tokens.list.element"],
        "compression": {
            leaf: "none" if leaf == "chunk_times.list.element" else "snappy" for leaf in leaves
        },
        "write_statistics": [leaf for leaf in leaves if leaf != "chunk_times.list.element"],
    }


def write_parquet(jsonl_path: str | Path) -> Path | None:
    """Write requests.parquet beside a closed `jsonl_path`; None (and no file) when it cannot.

    The lines are read by DuckDB (`loadgen.jsonl_scan`: half the CPU time for 1M records) where
    its read holds, else by pyarrow's JSON reader block by block."""
    import pyarrow as pa

    jsonl_path = Path(jsonl_path)
    target = parquet_path(jsonl_path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with jsonl_path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(size - TAIL_BYTES, 0))
            tail = handle.read()
        if size and not tail.endswith(b"\n"):
            return _discard(temporary)  # a last line without newline: not closed
        schema = requests_schema()
        try:
            _write(temporary, scan_tables(jsonl_path, schema, size), size, tail)
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
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    header = {b"batchgate.schema": SCHEMA_NAME.encode(), b"batchgate.schema_version": b"1"}
    schema = requests_schema().with_metadata(header)
    with pq.ParquetWriter(temporary, schema, **_write_options()) as writer:
        for table in tables:
            for name, default in _DEFAULTS.items():
                index = table.schema.get_field_index(name)
                table = table.set_column(index, name, pc.coalesce(table[name], default))
            writer.write_table(table)
        writer.add_key_value_metadata(
            {
                **header,
                b"batchgate.jsonl_bytes": str(size).encode(),
                b"batchgate.jsonl_tail_sha256": hashlib.sha256(tail).hexdigest().encode(),
                b"batchgate.partial_last_line": b"false",
            }
        )


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
    if meta.get(b"batchgate.schema") != SCHEMA_NAME.encode():
        problems.append("metadata batchgate.schema is not batchgate.requests")
    if meta.get(b"batchgate.schema_version") != str(SCHEMA_VERSION).encode():
        problems.append(f"metadata batchgate.schema_version is not {SCHEMA_VERSION}")
    data = jsonl_path.read_bytes()
    if meta.get(b"batchgate.jsonl_bytes") != str(len(data)).encode():
        problems.append("stamp jsonl_bytes differs from the JSONL's byte size")
    digest = hashlib.sha256(data[-TAIL_BYTES:]).hexdigest().encode()
    if meta.get(b"batchgate.jsonl_tail_sha256") != digest:
        problems.append("stamp jsonl_tail_sha256 differs from the JSONL's last 64 KiB")
    lines = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    if table.num_rows != len(lines):
        problems.append(f"{table.num_rows} rows for {len(lines)} JSONL lines")
        return problems
    names = requests_schema().names
    for number, (row, line) in enumerate(zip(table.to_pylist(), lines, strict=True), start=1):
        expected = {name: line.get(name, _DEFAULTS.get(name)) for name in names}
        if row != expected:
            problems.append(f"row {number - 1} differs from line {number}")
            break
    return problems
