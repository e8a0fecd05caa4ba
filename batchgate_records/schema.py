"""The request record's fields and `requests.parquet`'s schema, options and stamp
(docs/records.md), for the writer (`loadgen`) and the reader (`gate`) alike.

Owns the record's field lists (the clocks and counts the gate reads as float64, its categorical
fields, which keys a line must carry and which may hold null, the optional fields and the value an
older record's missing one meant, `with_defaults` filling them), the Arrow schema of
`requests.parquet` (every field of a JSONL record, in line order), its writer options, the
metadata keys, and the stamp that ties a Parquet file to the JSONL bytes it was made from
(`jsonl_stamp`, `stamp_matches`). It reads no records and writes no files; the products' errors
(the gate's `RecordsError`) stay with them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CATEGORICAL_FIELDS",
    "FLOAT_FIELDS",
    "META_JSONL_BYTES",
    "META_JSONL_TAIL_SHA256",
    "META_PARTIAL_LAST_LINE",
    "META_SCHEMA",
    "META_SCHEMA_VERSION",
    "NULLABLE_FIELDS",
    "OPTIONAL_DEFAULTS",
    "OPTIONAL_FLOAT_FIELDS",
    "REQUIRED_FIELDS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "TAIL_BYTES",
    "jsonl_stamp",
    "jsonl_tail",
    "parquet_path",
    "requests_schema",
    "stamp_matches",
    "with_defaults",
    "write_options",
]

SCHEMA_NAME = "batchgate.requests"
SCHEMA_VERSION = 1
# Key-value metadata of requests.parquet (docs/records.md): bytes in, bytes out.
META_SCHEMA = b"batchgate.schema"
META_SCHEMA_VERSION = b"batchgate.schema_version"
META_JSONL_BYTES = b"batchgate.jsonl_bytes"
META_JSONL_TAIL_SHA256 = b"batchgate.jsonl_tail_sha256"
META_PARTIAL_LAST_LINE = b"batchgate.partial_last_line"
# How much of the JSONL's end the stamp hashes: a writer only appends, so a JSONL that changed
# after the Parquet was made differs in size or in its last bytes.
TAIL_BYTES = 64 * 1024

# The fields the gate reads, as float64 (NaN for null) and as categorical codes.
FLOAT_FIELDS = (
    "planned_at",
    "sent_at",
    "first_token_at",
    "done_at",
    "prompt_tokens",
    "output_tokens",
    "http_status",
)
CATEGORICAL_FIELDS = (
    "status",
    "stage",
    "priority",
    "length_class",
    "endpoint",
    "chunk_tokens_source",
)
# Reasoning-aware timing and consistency probes (docs/records.md), read like FLOAT_FIELDS but
# optional in a line: an older record (or a target without reasoning) reads as NaN.
OPTIONAL_FLOAT_FIELDS = ("first_reasoning_at", "first_content_at", "reasoning_tokens", "probe")
# Optional in a JSONL record (older records lack them), with the value such a record meant:
# `endpoint` chat; `chunk_tokens_source` assumed (one token a chunk). The Parquet holds the value.
OPTIONAL_DEFAULTS = {"endpoint": "chat", "chunk_tokens_source": "assumed"}
# Every line must carry these keys (a reader names the line that lacks one) ...
REQUIRED_FIELDS = (
    *FLOAT_FIELDS,
    *(f for f in CATEGORICAL_FIELDS if f not in OPTIONAL_DEFAULTS),
    "chunk_times",
    "chunk_tokens",
)
# ... and of those, these may hold null.
NULLABLE_FIELDS = FLOAT_FIELDS[1:]


def requests_schema() -> pa.Schema:
    """requests.parquet's columns, in the JSONL's field order (docs/records.md)."""
    import pyarrow as pa  # here: `import gate` and the load process's imports stay light

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


def write_options() -> dict[str, object]:
    """`pyarrow.parquet.ParquetWriter` options of requests.parquet: dictionary pages for the
    strings and token counts (few distinct values; not `id`, one value a row, whose dictionary
    was built only to be dropped), and no compression for `chunk_times`, most of the file's
    bytes: six-decimal times hardly compress, and decompressing them was most of the time a
    check spent reading the file (snappy: 2.2 s against 0.7 s for 1M records). No statistics
    for `chunk_times` (nothing reads them; their min/max was a sixth of the writing); the
    gate reads `chunk_tokens`' (`gate.rundir.request_parquet.TrustedParquet`)."""
    schema = requests_schema()
    strings = [f.name for f in schema if str(f.type) == "string" and f.name != "id"]
    names = schema.names
    leaves = [f"{n}.list.element" if str(schema.field(n).type).startswith("list") else n
              for n in names]  # fmt: skip
    # A list column's options are keyed by its leaf (`chunk_tokens.list.element`): keyed by the
    # column's name they were silently not applied, and the all-ones token counts were stored
    # plain and uncompressed (a third of the file).
    return {
        "use_dictionary": [*strings, "chunk_tokens.list.element"],
        "compression": {
            leaf: "none" if leaf == "chunk_times.list.element" else "snappy" for leaf in leaves
        },
        "write_statistics": [leaf for leaf in leaves if leaf != "chunk_times.list.element"],
    }


def parquet_path(jsonl_path: str | Path) -> Path:
    """`<profile>/requests.parquet` beside `<profile>/requests.jsonl`."""
    path = Path(jsonl_path)
    return path.with_name(f"{path.stem}.parquet")


def jsonl_tail(jsonl_path: Path) -> tuple[int, bytes]:
    """The JSONL's byte size now and its last bytes, what `jsonl_stamp` hashes."""
    with jsonl_path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(size - TAIL_BYTES, 0))
        return size, handle.read()


def jsonl_stamp(
    jsonl_bytes: int,
    tail: bytes,
    *,
    partial_last_line: bool,
    schema: str = SCHEMA_NAME,
    version: int = SCHEMA_VERSION,
) -> dict[bytes, bytes]:
    """The metadata saying which JSONL bytes a Parquet file holds (docs/records.md): the bytes
    read (`jsonl_bytes`, a skipped partial last line included) and the last `TAIL_BYTES` of them;
    `schema` / `version` name the file's kind (requests.parquet's by default)."""
    return {
        META_SCHEMA: schema.encode(),
        META_SCHEMA_VERSION: str(version).encode(),
        META_JSONL_BYTES: str(jsonl_bytes).encode(),
        META_JSONL_TAIL_SHA256: hashlib.sha256(tail[-TAIL_BYTES:]).hexdigest().encode(),
        META_PARTIAL_LAST_LINE: b"true" if partial_last_line else b"false",
    }


def stamp_matches(meta: dict[bytes, bytes], jsonl: Path) -> bool:
    """Whether a Parquet file's stamp (`jsonl_stamp`) describes `jsonl` as it is now."""
    try:
        size, tail = jsonl_tail(jsonl)
    except OSError:
        return False
    digest = hashlib.sha256(tail[-TAIL_BYTES:]).hexdigest().encode()
    return meta.get(META_JSONL_BYTES) == str(size).encode() and (
        meta.get(META_JSONL_TAIL_SHA256) == digest
    )


def with_defaults(table: pa.Table) -> pa.Table:
    """`table` with the value an older record meant (`OPTIONAL_DEFAULTS`) where one of those
    fields is null: what requests.parquet holds, whichever side wrote it."""
    import pyarrow.compute as pc

    for name, default in OPTIONAL_DEFAULTS.items():
        column = table.column(name)
        if column.null_count:
            index = table.schema.get_field_index(name)
            # coalesce, not fill_null: that one imports pandas (0.2 s)
            table = table.set_column(index, name, pc.coalesce(column, default))
    return table
