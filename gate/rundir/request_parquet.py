"""`requests.parquet` on disk (docs/records.md): deciding whether one may be trusted, reading its
batches, and writing one atomically.

Owns the reader's side of the stamp: a Parquet file stands for `requests.jsonl` only when it
opens, names this schema and a version this module reads, has the gate's columns with their
documented types, and its stamp matches the JSONL now (byte size and a hash of the last bytes: a
writer only appends, so a JSONL that grew, or was cut or rewritten at its end, differs); a file
that fails any of that is not used, with a note saying why when that is news (corrupt, foreign,
another version). And the writer's side for the gate (a crashed run's JSONL, read for the first
time): rows go to a temporary file, the stamp is added at the end, and the file replaces any old
one in one rename, so no reader sees half a file. It does not parse JSONL or compute columns.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gate.rundir.record_schema import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    META_JSONL_BYTES,
    META_JSONL_TAIL_SHA256,
    META_PARTIAL_LAST_LINE,
    META_SCHEMA,
    META_SCHEMA_VERSION,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    TAIL_BYTES,
    jsonl_tail,
    requests_schema,
    write_options,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["GATE_COLUMNS", "ParquetSink", "TrustedParquet", "open_trusted"]

GATE_COLUMNS = (*FLOAT_FIELDS, *CATEGORICAL_FIELDS, "chunk_times", "chunk_tokens")


class TrustedParquet:
    """An opened requests.parquet that passed the checks; `batches()` yields the gate's columns."""

    def __init__(self, file: pq.ParquetFile, *, partial_last_line: bool) -> None:
        self.file = file
        self.partial_last_line = partial_last_line

    def batches(self) -> Iterator[pa.Table]:
        # Row group by row group: each is decoded on every core, and memory stays that of one
        # (a writer's block of lines); iter_batches decodes slower.
        for index in range(self.file.num_row_groups):
            yield self.file.read_row_group(index, columns=list(GATE_COLUMNS))


def open_trusted(parquet: Path, jsonl: Path | None, notes: list[str]) -> TrustedParquet | None:
    """The Parquet file when it may stand for `jsonl` (None: there is no JSONL, the Parquet
    is all there is), else None, with a note in `notes` when the reason is worth telling."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parquet.exists():
        return None
    instead = f"; read {jsonl.name} instead" if jsonl is not None else ""
    try:
        file = pq.ParquetFile(parquet)
        meta = file.metadata.metadata or {}
        schema = file.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        notes.append(f"{parquet.name}: unreadable ({_short(exc)}){instead}")
        return None
    if meta.get(META_SCHEMA) != SCHEMA_NAME.encode():
        notes.append(f"{parquet.name}: not a batchgate request file{instead}")
        return None
    version = meta.get(META_SCHEMA_VERSION, b"")
    if version != str(SCHEMA_VERSION).encode():
        notes.append(
            f"{parquet.name}: schema version {version.decode(errors='replace')!r}, this "
            f"batchgate reads {SCHEMA_VERSION}{instead}"
        )
        return None
    expected = requests_schema()
    for name in GATE_COLUMNS:
        index = schema.get_field_index(name)
        if index < 0 or not schema.field(index).type.equals(expected.field(name).type):
            notes.append(f"{parquet.name}: column {name!r} missing or of another type{instead}")
            return None
    if jsonl is not None and not _stamp_matches(meta, jsonl):
        return None  # older than the JSONL (a run still writing, or resumed): not news
    partial = meta.get(META_PARTIAL_LAST_LINE) == b"true"
    return TrustedParquet(file, partial_last_line=partial)


def _stamp_matches(meta: dict[bytes, bytes], jsonl: Path) -> bool:
    try:
        size, tail = jsonl_tail(jsonl)
    except OSError:
        return False
    digest = hashlib.sha256(tail[-TAIL_BYTES:]).hexdigest().encode()
    return meta.get(META_JSONL_BYTES) == str(size).encode() and (
        meta.get(META_JSONL_TAIL_SHA256) == digest
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


class ParquetSink:
    """Writes tables to a temporary file beside `path`; `commit` adds the stamp and renames.

    A sink that cannot write (read-only run directory, full disk) stops writing and keeps why in
    `failure`: the records read are whole without the file, the next read parses again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failure: str | None = None
        self._temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        if self.failure is not None:
            return
        try:
            self._open().write_table(table)
        except Exception as exc:  # any writer failure only costs the cache
            self._fail(exc)

    def commit(self, stamp: dict[bytes, bytes]) -> None:
        if self.failure is not None:
            return
        try:
            writer = self._open()
            writer.add_key_value_metadata(stamp)
            writer.close()
            self._writer = None
            os.replace(self._temporary, self.path)
        except Exception as exc:  # likewise
            self._fail(exc)

    def abort(self) -> None:
        if self._writer is not None:
            # The temporary file is removed just below either way.
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        self._temporary.unlink(missing_ok=True)

    def _open(self) -> pq.ParquetWriter:
        import pyarrow.parquet as pq

        if self._writer is None:
            schema = requests_schema().with_metadata(
                {META_SCHEMA: SCHEMA_NAME.encode(), META_SCHEMA_VERSION: b"%d" % SCHEMA_VERSION}
            )
            self._writer = pq.ParquetWriter(self._temporary, schema, **write_options())
        return self._writer

    def _fail(self, exc: BaseException) -> None:
        self.failure = f"{self.path.name} not written: {_short(exc)}"
        self.abort()
