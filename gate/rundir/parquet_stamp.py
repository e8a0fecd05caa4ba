"""What the stamp of a `requests.parquet` says about the `requests.jsonl` beside it now.

Owns `cut_since_stamp`: the Parquet file was made from a JSONL of a stamped size whose last bytes
hash to the stamped digest (docs/records.md); a writer only appends, so a JSONL now shorter, or
as long but with other last bytes, lost or changed records after the Parquet file was made. It
is asked before the request reader runs (which would replace a stale Parquet file, and with it
the evidence). It does not read the records or judge (`gate.rundir.consistency`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from batchgate_records.schema import (
    META_JSONL_BYTES,
    META_JSONL_TAIL_SHA256,
    META_SCHEMA,
    SCHEMA_NAME,
    TAIL_BYTES,
    jsonl_tail,
)

__all__ = ["cut_since_stamp", "parquet_name"]


def cut_since_stamp(jsonl: Path) -> str | None:
    """What the stamp of the requests.parquet beside `jsonl` says about the JSONL now. A writer
    only appends: a JSONL shorter than the bytes the Parquet file was made from, or as long but
    with other last bytes, lost or changed records after it was made. None: no such Parquet
    file, one without a stamp, or a JSONL that only grew."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = jsonl.with_name(parquet_name(jsonl))
    if not parquet.exists() or not jsonl.exists():
        return None
    try:
        metadata = pq.read_metadata(parquet)
        meta, rows = metadata.metadata or {}, metadata.num_rows
        if meta.get(META_SCHEMA) != SCHEMA_NAME.encode():
            return None
        stamped = int(meta.get(META_JSONL_BYTES, b""))
        size, tail = jsonl_tail(jsonl)
    except (pa.ArrowException, ValueError, OSError):
        return None  # an unreadable Parquet file is read around, with its own note
    if size < stamped:
        return (
            f"{jsonl.name} is {size} bytes, shorter than the {stamped} bytes "
            f"{parquet_name(jsonl)} ({rows} records) was made from: records were cut"
        )
    digest = hashlib.sha256(tail[-TAIL_BYTES:]).hexdigest().encode()
    if size == stamped and meta.get(META_JSONL_TAIL_SHA256) != digest:
        return (
            f"{jsonl.name} was rewritten after {parquet_name(jsonl)} ({rows} records) was made "
            "from it: its last bytes differ"
        )
    return None


def parquet_name(jsonl: Path) -> str:
    return f"{jsonl.stem}.parquet"
