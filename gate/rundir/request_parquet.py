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
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from batchgate_records.schema import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    META_PARTIAL_LAST_LINE,
    META_SCHEMA,
    META_SCHEMA_VERSION,
    OPTIONAL_FLOAT_FIELDS,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    requests_schema,
    stamp_matches,
    write_options,
)
from gate.rundir.ahead import read_ahead

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["GATE_COLUMNS", "ParquetSink", "TrustedParquet", "open_trusted"]

GATE_COLUMNS = (
    *FLOAT_FIELDS, *OPTIONAL_FLOAT_FIELDS, *CATEGORICAL_FIELDS, "chunk_times", "chunk_tokens"
)  # fmt: skip
# Row groups decoded per slice (the load generator writes ~38k requests a group): measured
# with 1-8 and a whole-file read, small slices were as fast or faster, in half the memory.
_GROUPS_PER_SLICE = 2


class TrustedParquet:
    """An opened requests.parquet that passed the checks; `tables()` gives the gate's columns."""

    def __init__(self, path: Path, file: pq.ParquetFile, *, partial_last_line: bool) -> None:
        self.path = path
        self.file = file
        self.partial_last_line = partial_last_line

    def tables(self, *, chunk_tokens: bool = True) -> Iterator[pa.Table]:
        """The gate's columns (categorical strings as dictionaries, as stored), a few row groups
        at a time: every column of a slice is decoded in parallel, and the decoded chunk times
        alive at once are a slice's (~20 MB), not the whole file's (256 MB for 1M requests).
        Without `chunk_tokens` when the caller knows them (`tokens_all_one`)."""
        import pyarrow.parquet as pq

        columns = [c for c in GATE_COLUMNS if chunk_tokens or c != "chunk_tokens"]
        # Not memory-mapped: mapped pages would count in the process's resident memory.
        file = pq.ParquetFile(self.path, pre_buffer=True, read_dictionary=list(CATEGORICAL_FIELDS))
        groups = list(range(file.metadata.num_row_groups))
        slices = (
            file.read_row_groups(groups[start : start + _GROUPS_PER_SLICE], columns=columns)
            for start in range(0, len(groups), _GROUPS_PER_SLICE)
        )
        # The next slice decodes while the caller takes gaps from this one.
        yield from read_ahead(slices, name="parquet-read")

    def num_chunk_slots(self) -> int:
        """An upper bound of the chunk times in the file (an empty list takes a slot too)."""
        meta = self.file.metadata
        index = _leaf_index(self.file, "chunk_times")
        return sum(meta.row_group(g).column(index).num_values for g in range(meta.num_row_groups))

    def one_token_elements(self) -> int | None:
        """How many `chunk_tokens` elements the file holds when its row groups' statistics say
        every one is 1, else None. The caller checks that count against the chunk times it read
        (an empty list counts as a null in the statistics, so a null element would show as one
        element short): then the column, a third of what a check would decode, need not be
        read."""
        meta = self.file.metadata
        index = _leaf_index(self.file, "chunk_tokens")
        present = 0
        for group in range(meta.num_row_groups):
            chunk = meta.row_group(group).column(index)
            stats = chunk.statistics
            if stats is None or stats.null_count is None:
                return None
            values = chunk.num_values - stats.null_count
            if values and not (stats.has_min_max and stats.min == 1 and stats.max == 1):
                return None
            present += values
        return present


def _leaf_index(file: pq.ParquetFile, name: str) -> int:
    for index in range(file.metadata.num_columns):
        if file.schema.column(index).path.split(".")[0] == name:
            return index
    raise KeyError(name)


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
    if jsonl is not None and not stamp_matches(meta, jsonl):
        return None  # older than the JSONL (a run still writing, or resumed): not news
    partial = meta.get(META_PARTIAL_LAST_LINE) == b"true"
    return TrustedParquet(parquet, file, partial_last_line=partial)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


class ParquetSink:
    """Writes tables to a temporary file beside `path`; `commit` adds the stamp and renames.

    Writing happens on a thread of its own (pyarrow encodes without the GIL), at most two tables
    behind the caller, so the caller's parsing and the encoding overlap. A sink that cannot
    write (read-only run directory, full disk) stops writing and keeps why in `failure`: the
    records read are whole without the file, the next read parses again."""

    _BACKLOG = 2

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failure: str | None = None
        self._temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._writer: pq.ParquetWriter | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def write(self, table: pa.Table) -> None:
        if self.failure is not None:
            return
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="parquet-sink")
        self._pending.append(self._thread.submit(self._write_now, table))
        while len(self._pending) > self._BACKLOG:
            self._pending.pop(0).result()

    def _write_now(self, table: pa.Table) -> None:
        if self.failure is not None:
            return
        try:
            self._open().write_table(table)
        except Exception as exc:  # any writer failure only costs the cache
            self._fail(exc)

    def commit(self, stamp: dict[bytes, bytes]) -> None:
        self._drain()
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
        self._drain()
        self._close_and_remove()

    def _drain(self) -> None:
        for future in self._pending:
            future.result()  # _write_now keeps its own failures
        self._pending.clear()
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None

    def _close_and_remove(self) -> None:
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
        self._close_and_remove()
