"""Request records (docs/records.md) as numpy columns: `read_requests` and `RequestColumns`.

Owns turning a profile's records into arrays: times as float64 seconds (NaN for null),
categorical fields (status, stage, priority, length class, endpoint, chunk tokens source) as small
integer codes with their names, and per-token ITL gaps (computed block by block through
`gate.rundir.gaps.itl_gaps`, so a million records with 32 chunks each never exist as Python
floats). The records come from `requests.parquet` when it may stand for the JSONL
(`gate.rundir.request_parquet`), else from parsing `requests.jsonl` (`gate.rundir.jsonl_records`),
which also writes the Parquet file so the next read is fast. It does not know what the columns
mean for a gate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from batchgate_records.schema import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    OPTIONAL_FLOAT_FIELDS,
    jsonl_stamp,
    parquet_path,
)
from gate.rundir import jsonl_scan
from gate.rundir.arrow_views import float_values, list_offsets, list_values, primitive_values
from gate.rundir.gaps import itl_gaps
from gate.rundir.jsonl_records import JsonlRecords, RecordsError
from gate.rundir.request_parquet import ParquetSink, TrustedParquet, open_trusted

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Categorical", "RecordsError", "RequestColumns", "read_requests"]


@dataclass(frozen=True, kw_only=True)
class Categorical:
    """Integer codes (int16) plus the names they stand for."""

    codes: np.ndarray
    names: tuple[str, ...]

    def mask(self, allowed: tuple[str, ...] | None) -> np.ndarray | None:
        """Boolean mask of rows whose value is in `allowed` (None: no restriction)."""
        if allowed is None:
            return None
        # A table lookup per row: np.isin sorts and searches instead.
        table = np.array([name in allowed for name in self.names] or [False], dtype=bool)
        return table[self.codes]

    def equals(self, name: str) -> np.ndarray:
        if name not in self.names:
            return np.zeros(len(self.codes), dtype=bool)
        return self.codes == self.names.index(name)


@dataclass(frozen=True, kw_only=True)
class RequestColumns:
    """One entry per request record; `itl_seconds` holds per-token gaps of all requests."""

    path: str
    planned_at: np.ndarray
    sent_at: np.ndarray
    first_token_at: np.ndarray
    done_at: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    http_status: np.ndarray
    status: Categorical
    stage: Categorical
    priority: Categorical
    length_class: Categorical
    endpoint: Categorical
    chunk_tokens_source: Categorical  # usage | mixed | assumed (docs/records.md)
    itl_seconds: np.ndarray  # per-token gaps, request after request
    itl_counts: np.ndarray  # number of entries of itl_seconds per request (int64)
    partial_last_line: bool = False
    # Reasoning timing and consistency probes (schema.OPTIONAL_FLOAT_FIELDS): NaN where a
    # record does not say; `probe` is the probe's index in the probe set, NaN for other requests.
    first_reasoning_at: np.ndarray | None = None
    first_content_at: np.ndarray | None = None
    reasoning_tokens: np.ndarray | None = None
    probe: np.ndarray | None = None
    # What the reader noticed about the files (a corrupt Parquet read around, one not written).
    notes: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.planned_at)


def read_requests(path: str | Path, *, max_records: int | None = None) -> RequestColumns:
    """Read a profile's request records; `path` is its requests.jsonl.

    Uses requests.parquet beside it when that may stand for the JSONL (docs/records.md), else
    parses the JSONL (raising RecordsError, with the line number, on a corrupt line) and writes
    the Parquet file from what it parsed. Without a JSONL the Parquet file is read on its own.
    `max_records` reads only the JSONL's first that-many lines (complete lines: what a reader saw
    of a file still being written, see `gate.rundir.abort`) and neither reads nor writes Parquet.
    """
    path = Path(path)
    notes: list[str] = []
    if max_records is None:
        jsonl = path if path.exists() else None
        trusted = open_trusted(parquet_path(path), jsonl, notes)
        if trusted is not None:
            columns = _from_parquet(path, trusted, notes, has_jsonl=jsonl is not None)
            if columns is not None:
                return columns
        if jsonl is None and not notes:
            raise RecordsError(f"{path}: cannot read: no such file")
        if jsonl is None:
            raise RecordsError(f"{parquet_path(path)}: {notes[-1].split(': ', 1)[-1]}")
    return _from_jsonl(path, max_records, notes)


def _from_parquet(
    path: Path, trusted: TrustedParquet, notes: list[str], *, has_jsonl: bool
) -> RequestColumns | None:
    import pyarrow as pa

    try:
        builder = _ColumnBuilder(gap_slots=trusted.num_chunk_slots())
        ones = trusted.one_token_elements()
        if ones is not None:
            for table in trusted.tables(chunk_tokens=False):
                builder.add(table, one_token_each=True)
        if ones is None or ones != builder.num_chunk_times:
            # A server that sends several tokens a chunk (or a file without statistics).
            builder = _ColumnBuilder()
            for table in trusted.tables(chunk_tokens=True):
                builder.add(table)
    except (pa.ArrowException, OSError, ValueError) as exc:
        # A file that opened but whose pages do not decode (truncated, bit rot).
        problem = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else repr(exc)
        if not has_jsonl:
            raise RecordsError(f"{parquet_path(path)}: unreadable: {problem}") from None
        notes.append(f"{parquet_path(path).name}: unreadable ({problem}); read {path.name} instead")
        return None
    # Arrow's allocator keeps the decoded slices' memory for reuse unless told; the gates'
    # selections would come on top of it.
    pa.default_memory_pool().release_unused()
    if not has_jsonl:
        notes.append(f"{path.name} missing: read {parquet_path(path).name} alone")
    return builder.build(path, partial_last_line=trusted.partial_last_line, notes=notes)


def _from_jsonl(path: Path, max_records: int | None, notes: list[str]) -> RequestColumns:
    if max_records is None and jsonl_scan.available():
        try:
            return _parse(jsonl_scan.JsonlScan(path), path, notes, write_parquet=True)
        except jsonl_scan.Unproven:
            pass  # the line-exact reader below reads what can be read and names what cannot
    records = JsonlRecords(path, max_records=max_records)
    return _parse(records, path, notes, write_parquet=max_records is None)


def _parse(
    records: JsonlRecords | jsonl_scan.JsonlScan,
    path: Path,
    notes: list[str],
    *,
    write_parquet: bool,
) -> RequestColumns:
    sink = ParquetSink(parquet_path(path)) if write_parquet else None
    builder = _ColumnBuilder(gap_slots=_gap_bound(path))
    try:
        for table in records.tables():
            builder.add(table)
            if sink is not None:
                sink.write(table)
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    if sink is not None:
        sink.commit(
            jsonl_stamp(
                records.bytes_read, records.tail, partial_last_line=records.partial_last_line
            )
        )
        if sink.failure is not None:
            notes.append(sink.failure)
    import pyarrow as pa

    # As after a Parquet read: the parsed blocks' memory goes back before the gaps are joined
    # and the gates select from the columns (it was most of a JSONL-only check's peak).
    pa.default_memory_pool().release_unused()
    return builder.build(path, partial_last_line=records.partial_last_line, notes=notes)


def _gap_bound(path: Path) -> int | None:
    """At most how many one-token gaps a JSONL of this size holds (a chunk time takes at least
    a digit and a separator), when an array that long is a small part of the memory: its
    untouched pages are never resident, and filling it in place spares joining a run's gaps at
    the end: a copy of the largest array of a check into fresh memory (1M records: 60 MiB of
    peak memory and 0.3-0.8 s of a JSONL-only check here). None: join them (a huge file, or one
    that is gone)."""
    try:
        bound = path.stat().st_size // 2
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
    return bound if bound * 4 <= memory // 4 else None


class _Codes:
    """Codes of one categorical field, accumulated over arrays whose dictionaries differ."""

    def __init__(self) -> None:
        self.table: dict[str, int] = {}
        self.parts: list[np.ndarray] = []

    def add(self, array: pa.Array) -> None:
        import pyarrow as pa

        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        table = self.table
        remap = np.array(
            [table.setdefault(str(name), len(table)) for name in array.dictionary.to_pylist()],
            dtype=np.int16,
        )
        indices = primitive_values(array.indices)
        self.parts.append(remap[indices] if len(remap) else np.zeros(0, dtype=np.int16))

    def build(self) -> Categorical:
        codes = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int16)
        return Categorical(codes=codes, names=tuple(self.table))


class _ColumnBuilder:
    """The gate's columns of tables of requests.parquet's schema, chunk by chunk (a Parquet
    table has one chunk per row group): numpy views of each chunk's buffers, joined once."""

    def __init__(self, *, gap_slots: int | None = None) -> None:
        self.floats: dict[str, list[np.ndarray]] = {
            name: [] for name in (*FLOAT_FIELDS, *OPTIONAL_FLOAT_FIELDS)
        }
        self.codes = {name: _Codes() for name in CATEGORICAL_FIELDS}
        self.gaps: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.num_chunk_times = 0
        # One-token gaps go straight into one array of at most `gap_slots` (untouched pages of
        # np.empty cost nothing): joining per-slice gaps copied the largest array of a run.
        self._gap_buffer = None if gap_slots is None else np.empty(gap_slots, dtype=np.float32)
        self._gaps_filled = 0

    def add(self, table: pa.Table, *, one_token_each: bool = False) -> None:
        """Add a table's rows; `one_token_each`: every chunk carries one token (the table then
        need not have `chunk_tokens`)."""
        import pyarrow as pa

        for name, parts in self.floats.items():
            for column in table.column(name).chunks:
                values = float_values(column.cast(pa.float64()))
                # Owned, not a view: a buffer of a table imported from DuckDB keeps the whole
                # batch alive (chunk lists included), 1.2 GiB for 1M records instead of 0.4.
                parts.append(values if values.base is None else values.copy())
        for name, codes in self.codes.items():
            for column in table.column(name).chunks:
                codes.add(column)
        times = table.column("chunk_times")
        if one_token_each:
            for chunk in times.chunks:
                values = list_values(chunk)
                self.num_chunk_times += len(values)
                num_chunks = np.diff(list_offsets(chunk)).astype(np.int64)
                size = int(np.maximum(num_chunks - 1, 0).sum())
                out = self._gap_slice(size)
                gaps, counts = itl_gaps(values, None, num_chunks, out=out)
                if out is None:
                    self._flush_gap_buffer()
                    self.gaps.append(gaps)
                self.counts.append(counts)
            return
        times, tokens = times.combine_chunks(), table.column("chunk_tokens").combine_chunks()
        num_chunks = np.diff(list_offsets(times)).astype(np.int64)
        gaps, counts = _itl(list_values(times), list_values(tokens), num_chunks)
        out = self._gap_slice(len(gaps))
        if out is None:
            self._flush_gap_buffer()
            self.gaps.append(gaps)
        else:
            out[:] = gaps  # a table's gaps, in memory the allocator hands out again and again
        self.counts.append(counts)

    def _flush_gap_buffer(self) -> None:
        if self._gap_buffer is not None:
            self.gaps.append(self._gap_buffer[: self._gaps_filled])
            self._gap_buffer = None

    def _gap_slice(self, size: int) -> np.ndarray | None:
        buffer, start = self._gap_buffer, self._gaps_filled
        if buffer is None or start + size > len(buffer):
            return None  # then itl_gaps allocates, and the gaps are joined at the end
        self._gaps_filled += size
        return buffer[start : start + size]

    def build(self, path: Path, *, partial_last_line: bool, notes: list[str]) -> RequestColumns:
        self._flush_gap_buffer()

        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            if len(parts) == 1:
                return parts[0]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        floats = {name: joined(parts, np.float64) for name, parts in self.floats.items()}
        problem = impossible_record(floats)
        if problem is not None:
            raise RecordsError(f"{path}: {problem}: not a measurement")
        return RequestColumns(
            path=str(path),
            **floats,
            **{name: codes.build() for name, codes in self.codes.items()},
            itl_seconds=joined(self.gaps, np.float32),
            itl_counts=joined(self.counts, np.int64),
            partial_last_line=partial_last_line,
            notes=tuple(notes),
        )


# (later, earlier, what a negative difference would be): on one monotonic clock (the load
# generator's), none of these can come out negative in a real measurement.
_ORDERED = (
    ("first_token_at", "sent_at", "a negative TTFT"),
    ("done_at", "sent_at", "a negative E2E"),
    ("done_at", "first_token_at", "a stream that ended before its first token"),
)


def impossible_record(floats: dict[str, np.ndarray]) -> str | None:
    """The first record whose times or counts no measurement can produce ("record N: ..."),
    else None: a gate must not pass on a negative TTFT or a negative token count."""
    found: list[tuple[int, str]] = []
    for later, earlier, meaning in _ORDERED:
        a, b = floats[later], floats[earlier]
        with np.errstate(invalid="ignore"):  # NaN (null) compares False: nothing to check
            index = _first(a < b)
        if index is not None:
            gap = b[index] - a[index]
            found.append((index, f"{later} is {gap:.6g} s before {earlier} ({meaning})"))
    for name in ("prompt_tokens", "output_tokens"):
        with np.errstate(invalid="ignore"):
            index = _first(floats[name] < 0)
        if index is not None:
            found.append((index, f"{name} is {floats[name][index]:g}"))
    if not found:
        return None
    index, why = min(found, key=lambda item: item[0])  # the first check wins a tie
    return f"record {index + 1}: {why}"


def _first(bad: np.ndarray) -> int | None:
    return int(np.argmax(bad)) if bad.any() else None


def _itl(
    times: np.ndarray, tokens: np.ndarray, num_chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    # When every record's token sum equals its chunk count, every chunk counts as one token (a
    # content chunk cannot carry zero tokens): the common streaming case skips the token weights.
    one_each = len(tokens) == 0 or tokens.min() == tokens.max() == 1
    if not one_each:
        sums = np.concatenate(([0], np.cumsum(tokens, dtype=np.int64)))
        bounds = np.concatenate(([0], np.cumsum(num_chunks)))
        one_each = np.array_equal(sums[bounds[1:]] - sums[bounds[:-1]], num_chunks)
    return itl_gaps(times, None if one_each else tokens.astype(np.int64), num_chunks)
