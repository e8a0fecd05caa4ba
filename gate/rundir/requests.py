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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.rundir.gaps import itl_gaps
from gate.rundir.jsonl_records import JsonlRecords
from gate.rundir.record_schema import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    RecordsError,
    jsonl_stamp,
    parquet_path,
)
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
        wanted = [i for i, name in enumerate(self.names) if name in allowed]
        return np.isin(self.codes, wanted)

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

    builder = _ColumnBuilder()
    try:
        for batch in trusted.batches():
            builder.add(batch)
    except (pa.ArrowException, OSError, ValueError) as exc:
        # A file that opened but whose pages do not decode (truncated, bit rot).
        problem = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else repr(exc)
        if not has_jsonl:
            raise RecordsError(f"{parquet_path(path)}: unreadable: {problem}") from None
        notes.append(f"{parquet_path(path).name}: unreadable ({problem}); read {path.name} instead")
        return None
    if not has_jsonl:
        notes.append(f"{path.name} missing: read {parquet_path(path).name} alone")
    return builder.build(path, partial_last_line=trusted.partial_last_line, notes=notes)


def _from_jsonl(path: Path, max_records: int | None, notes: list[str]) -> RequestColumns:
    records = JsonlRecords(path, max_records=max_records)
    sink = ParquetSink(parquet_path(path)) if max_records is None else None
    builder = _ColumnBuilder()
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
    return builder.build(path, partial_last_line=records.partial_last_line, notes=notes)


class _Codes:
    """Codes of one categorical field, accumulated over tables whose dictionaries differ."""

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
        indices = _numpy(array.indices)
        self.parts.append(remap[indices] if len(remap) else np.zeros(0, dtype=np.int16))

    def build(self) -> Categorical:
        codes = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int16)
        return Categorical(codes=codes, names=tuple(self.table))


class _ColumnBuilder:
    """The gate's columns of tables (or record batches) of requests.parquet's schema."""

    def __init__(self) -> None:
        self.floats: dict[str, list[np.ndarray]] = {name: [] for name in FLOAT_FIELDS}
        self.codes = {name: _Codes() for name in CATEGORICAL_FIELDS}
        self.gaps: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        for name, parts in self.floats.items():
            column = _array(table, name).cast(pa.float64())
            values = _numpy(column)
            if column.null_count:
                bits = np.frombuffer(column.buffers()[0], dtype=np.uint8)
                valid = np.unpackbits(bits, bitorder="little")[column.offset :][: len(column)]
                values = np.where(valid, values, np.nan)
            parts.append(values)
        for name, codes in self.codes.items():
            codes.add(_array(table, name))
        times, tokens = _array(table, "chunk_times"), _array(table, "chunk_tokens")
        num_chunks = _numpy(pc.list_value_length(times)).astype(np.int64)
        gaps, counts = _itl(_numpy(times.flatten()), _numpy(tokens.flatten()), num_chunks)
        self.gaps.append(gaps)
        self.counts.append(counts)

    def build(self, path: Path, *, partial_last_line: bool, notes: list[str]) -> RequestColumns:
        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        return RequestColumns(
            path=str(path),
            **{name: joined(parts, np.float64) for name, parts in self.floats.items()},
            **{name: codes.build() for name, codes in self.codes.items()},
            itl_seconds=joined(self.gaps, np.float32),
            itl_counts=joined(self.counts, np.int64),
            partial_last_line=partial_last_line,
            notes=tuple(notes),
        )


_NUMPY_TYPES = {"double": np.float64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
                "int64": np.int64}  # fmt: skip


def _numpy(array: pa.Array) -> np.ndarray:
    # A zero-copy view of a primitive array without nulls, from its data buffer: pyarrow's own
    # `to_numpy` and `fill_null` import pandas when it is installed (0.2 s of every check).
    dtype = np.dtype(_NUMPY_TYPES[str(array.type)])
    data = array.buffers()[1]
    if data is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=array.offset + len(array))[array.offset :]


def _array(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    import pyarrow as pa

    column = table.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


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
