"""The sampler's `gpu.jsonl` (docs/records.md) as columns for the gate and as records for the
report.

Owns reading the file: pyarrow's JSON reader parses it into columns on its own threads, without
the GIL (a long run's 100k samples took 0.35-0.42 s as Python dicts, time the request reader,
running beside it, waited for), and the records as dicts are made only when something asks for
them (the HTML report's slices). A file that reader refuses (a partial last line, a bad line, a
field whose type changes) is read line by line by `read_jsonl` instead, with its exact notes and
errors, so what a run directory means never depends on which reader took it. A whole file the
column reader took gets a stamped Parquet copy (`gpu.parquet`, parquet_copy.py) that later reads
use while it matches. It does not know what the samples mean (`gate.metrics.sampler`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from batchgate_records.schema import TAIL_BYTES, jsonl_stamp
from gate.rundir.arrow_views import float_values
from gate.rundir.observer_records import read_jsonl
from gate.rundir.parquet_copy import read_copy, write_copy

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SAMPLES_SCHEMA_NAME", "SampleRecords", "read_samples"]

_NUMERIC = ("double", "int64")  # what pyarrow's JSON reader gives numbers


class SampleRecords(Sequence[dict[str, Any]]):
    """Sampler records: a sequence of dicts, plus `numbers(field)` and `strings(field)`."""

    def __init__(
        self, *, table: pa.Table | None = None, records: list[dict[str, Any]] | None = None
    ) -> None:
        if (table is None) == (records is None):
            raise ValueError("give a table or records")
        self._table = table
        self._records = records

    @property
    def records(self) -> list[dict[str, Any]]:
        if self._records is None:
            assert self._table is not None
            # Every column in every dict (None where a line had null or did not have the field):
            # the readers of these dicts ask with .get.
            self._records = self._table.to_pylist()
        return self._records

    def __len__(self) -> int:
        return self._table.num_rows if self._records is None else len(self._records)  # type: ignore[union-attr]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.records[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def numbers(self, field: str) -> np.ndarray:
        """The field as float64: NaN where it is null, absent or not a number (a gate on it
        then has no data there, never a made-up value)."""
        if self._table is None:
            values = [r.get(field) for r in self.records]
            return np.array([v if _is_number(v) else np.nan for v in values], dtype=np.float64)
        column = self._table.column(field) if field in self._table.column_names else None
        if column is None or str(column.type) not in _NUMERIC:
            return np.full(len(self), np.nan)
        # From the buffers (arrow_views): pyarrow's own to_numpy imports pandas (0.45 s here).
        parts = [float_values(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0)

    def strings(self, field: str) -> list[str | None]:
        """The field's values where they are strings (None where null, absent or not one)."""
        if self._table is None:
            values = [r.get(field) for r in self.records]
        elif field in self._table.column_names:
            values = self._table.column(field).to_pylist()
        else:
            values = []
        return [v if isinstance(v, str) else None for v in values] or [None] * len(self)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


SAMPLES_SCHEMA_NAME = "batchgate.gpu_samples"
SAMPLES_SCHEMA_VERSION = 1


def read_samples(path: Path, notes: list[str], limit: int | None = None) -> SampleRecords | None:
    """The file's records (None without the file); `limit`: only its first that-many lines.

    A whole file is read from its Parquet copy (`gpu.parquet`, parquet_copy.py) while the copy's
    stamp matches; a whole file the column reader parsed gets that copy written for the next
    read (100k samples: 0.2 s of CPU to parse, 0.02 s to read the copy)."""
    if not path.exists():
        return None
    import pyarrow as pa
    import pyarrow.json as pajson

    if limit is None:
        copy = read_copy(
            path, schema=SAMPLES_SCHEMA_NAME, version=SAMPLES_SCHEMA_VERSION, notes=notes
        )
        if copy is not None:
            return SampleRecords(table=copy)
    data = path.read_bytes()
    if limit is not None:
        end = -1
        for _ in range(limit):
            end = data.find(b"\n", end + 1)
            if end < 0:
                break
        data = data[: end + 1] if end >= 0 else data
    if not data.strip() or not data.endswith(b"\n"):
        return SampleRecords(records=read_jsonl(path, notes, limit) or [])
    try:
        table = pajson.read_json(pa.BufferReader(data))
    except pa.ArrowException:  # any refusal: the line parser decides, with its own errors
        return SampleRecords(records=read_jsonl(path, notes, limit) or [])
    if limit is None:
        # The stamp of exactly the bytes parsed (the sampler may have appended since).
        stamp = jsonl_stamp(
            len(data),
            data[-TAIL_BYTES:],
            partial_last_line=False,
            schema=SAMPLES_SCHEMA_NAME,
            version=SAMPLES_SCHEMA_VERSION,
        )
        write_copy(path, table, stamp)
    return SampleRecords(table=table)
