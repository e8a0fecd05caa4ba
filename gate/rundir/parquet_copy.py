"""The gate's Parquet copy of an observer's JSONL file (`steps.parquet`, `gpu.parquet`;
docs/records.md): written beside the JSONL after a whole-file parse, read instead of it only while
its stamp says it holds the JSONL's bytes as they are now.

Owns opening a copy (its schema name and version, the stamp) and writing one in a single rename,
so no reader sees half a file. A copy that does not decode is read around with a note; one that
cannot be written (read-only run directory, full disk) only costs the next read its speed. It
knows nothing of the columns inside.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from batchgate_records.schema import META_SCHEMA, META_SCHEMA_VERSION, stamp_matches

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["copy_path", "read_copy", "short_error", "unreadable_note", "write_copy"]


def copy_path(jsonl_path: Path) -> Path:
    """`<name>.parquet` beside `<name>.jsonl`."""
    return jsonl_path.with_name(f"{jsonl_path.stem}.parquet")


def read_copy(jsonl: Path, *, schema: str, version: int, notes: list[str]) -> pa.Table | None:
    """The copy of `jsonl` as a table when it names `schema` / `version` and its stamp matches
    the JSONL now; else None (with a note when the copy exists but does not decode)."""
    parquet = copy_path(jsonl)
    if not parquet.exists():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(parquet, memory_map=True)
        meta = file.metadata.metadata or {}
        if (
            meta.get(META_SCHEMA) != schema.encode()
            or meta.get(META_SCHEMA_VERSION) != str(version).encode()
        ):
            return None
        if not stamp_matches(meta, jsonl):
            return None  # older than the JSONL (a run still writing): not news
        return file.read(use_threads=True)
    except (pa.ArrowException, OSError) as exc:
        notes.append(unreadable_note(parquet, jsonl, exc))
        return None


def unreadable_note(parquet: Path, jsonl: Path, exc: BaseException) -> str:
    return f"{parquet.name}: unreadable ({short_error(exc)}); read {jsonl.name} instead"


def write_copy(jsonl: Path, table: pa.Table, stamp: dict[bytes, bytes]) -> None:
    """Write `table` with `stamp` (batchgate_records.schema.jsonl_stamp) as the copy of `jsonl`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = copy_path(jsonl)
    temporary = parquet.with_name(f".{parquet.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table.replace_schema_metadata(stamp), temporary)
        os.replace(temporary, parquet)
    except (pa.ArrowException, OSError):
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
