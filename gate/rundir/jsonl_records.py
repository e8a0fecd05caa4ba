"""Parsing `requests.jsonl` (docs/records.md) into Arrow tables of requests.parquet's schema.

Owns reading the JSONL in blocks of whole lines and turning each into a table: first through
pyarrow's JSON reader (C++, on every core) with the documented schema, then, for a block it cannot
take or whose table does not prove every line complete (a required value null where its key may
be missing), line by line through orjson, which either builds the same table or raises a
`RecordsError` naming the line. It tolerates a partial final line (a writer killed mid-line) and
reports it, and keeps what a Parquet stamp needs (bytes read, their tail). Missing optional fields
get the value an older record meant. It does not compute columns for gates or write files.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from batchgate_records.schema import (
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    NULLABLE_FIELDS,
    OPTIONAL_DEFAULTS,
    REQUIRED_FIELDS,
    TAIL_BYTES,
    requests_schema,
    with_defaults,
)
from gate.errors import BatchgateError, ExitCode
from gate.rundir.ahead import map_ahead

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NOT_NULL_FIELDS", "JsonlRecords", "RecordsError", "record_problem"]

_BLOCK_BYTES = 32 * 1024 * 1024
# pyarrow's JSON reader takes a block this size at a time.
_PARSE_BLOCK_BYTES = 4 * 1024 * 1024
# Blocks parsed side by side, one thread each: pyarrow's own threads on one block cost ~30 %
# more CPU a byte (measured on 2 cores), and a block alive costs its bytes and table.
_PARSERS = max(1, min(4, os.cpu_count() or 1))
_SCAN_BYTES = 256 * 1024
# Required and never null: a null read for one of these means the line lacks the key.
NOT_NULL_FIELDS = tuple(f for f in REQUIRED_FIELDS if f not in NULLABLE_FIELDS)
_REQUIRED_KEYS = frozenset(REQUIRED_FIELDS)
_STRING_FIELDS = tuple(f for f in CATEGORICAL_FIELDS if f not in OPTIONAL_DEFAULTS)


class RecordsError(BatchgateError, ValueError):
    """An unreadable request record or records file; the message names the file (and line)."""

    default_exit_code = ExitCode.NO_DATA


class JsonlRecords:
    """One pass over a requests.jsonl: `tables()` yields a table per block of lines; afterwards
    `bytes_read`, `tail` (the last bytes read) and `partial_last_line` describe what was read."""

    def __init__(self, path: Path, *, max_records: int | None = None) -> None:
        self.path = path
        self.max_records = max_records
        self.bytes_read = 0
        self.tail = b""
        self.partial_last_line = False

    def tables(self) -> Iterator[pa.Table]:
        import pyarrow.json as pj

        self._schema = requests_schema()
        self._read_options = pj.ReadOptions(use_threads=False, block_size=_PARSE_BLOCK_BYTES)
        self._parse_options = pj.ParseOptions(
            explicit_schema=self._schema, unexpected_field_behavior="ignore"
        )
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise RecordsError(f"{self.path}: cannot read: {exc}") from None
        with handle:
            blocks = self._prefix(handle) if self.max_records is not None else self._blocks(handle)
            # pyarrow parses (without the GIL) and checks the next blocks on threads of their
            # own while the caller turns this one into columns and Parquet.
            parsed = map_ahead(self._parse_block, blocks, workers=_PARSERS, name="jsonl-parse")
            for table, data, end, offset in parsed:
                yield table if table is not None else self._line_by_line(data[:end], offset)

    def _blocks(self, handle: Any) -> Iterator[tuple[bytes, int, int]]:
        """(data, end, offset): data[:end] is whole lines starting at byte `offset`."""
        offset, size = 0, _BLOCK_BYTES
        while True:
            data = handle.read(size)
            end = data.rfind(b"\n") + 1
            if len(data) < size:  # the file's end: whole lines, then maybe one without newline
                if end:
                    self._consumed(data, end)
                    yield data, end, offset
                last = data[end:]
                if last:
                    self._consumed(last, len(last))
                    if self._last_line_parses(last):
                        yield last + b"\n", len(last) + 1, offset + end
                return
            if end == 0:  # one line longer than a block: read it whole (rare)
                size *= 2
                handle.seek(offset)
                continue
            self._consumed(data, end)
            yield data, end, offset
            offset, size = offset + end, _BLOCK_BYTES
            handle.seek(offset)  # the cut-off line starts the next block

    def _prefix(self, handle: Any) -> Iterator[tuple[bytes, int, int]]:
        """The first `max_records` lines: what a reader saw of a file still being written."""
        lines = list(itertools.islice(handle, self.max_records))
        data = b"".join(lines)
        end = data.rfind(b"\n") + 1
        self._consumed(data, end)
        if end:
            yield data, end, 0
        last = data[end:]
        if last:
            self._consumed(last, len(last))
            if self._last_line_parses(last):
                yield last + b"\n", len(last) + 1, end

    def _consumed(self, data: bytes, end: int) -> None:
        self.bytes_read += end
        self.tail = (self.tail + data[max(end - TAIL_BYTES, 0) : end])[-TAIL_BYTES:]

    def _last_line_parses(self, line: bytes) -> bool:
        # A writer killed mid-line leaves this; docs/records.md says skip it and say so.
        if not line.strip():
            return False
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            self.partial_last_line = True
            return False
        return True

    def _parse_block(
        self, block: tuple[bytes, int, int]
    ) -> tuple[pa.Table | None, bytes, int, int]:
        """pyarrow's table of a block with the defaults filled in, when it proves to be what the
        lines say, else None (the block then goes line by line)."""
        data, end, offset = block
        table = self._parse(data, end)
        if table is None or not _proven_complete(table, data, end):
            return None, data, end, offset
        return with_defaults(table), data, end, offset

    def _parse(self, data: bytes, end: int) -> pa.Table | None:
        """pyarrow's table of data[:end], or None where it cannot take the block."""
        import pyarrow as pa
        import pyarrow.json as pj

        try:
            return pj.read_json(
                pa.py_buffer(memoryview(data)[:end]),
                read_options=self._read_options,
                parse_options=self._parse_options,
            )
        except pa.ArrowException:
            return None

    def _line_by_line(self, data: bytes, offset: int) -> pa.Table:
        import pyarrow as pa

        first_line = 1 + self._lines_before(offset)
        objects = []
        for number, line in enumerate(data.split(b"\n")[:-1], start=first_line):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise RecordsError(f"{self.path}:{number}: not a JSON object: {exc}") from None
            problem = record_problem(obj)
            if problem:
                raise RecordsError(f"{self.path}:{number}: {problem}")
            for name, default in OPTIONAL_DEFAULTS.items():
                if obj.get(name) is None:
                    obj[name] = default
            objects.append(obj)
        try:
            return pa.Table.from_pylist(objects, schema=self._schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise RecordsError(f"{self.path}: records from line {first_line}: {exc}") from None

    def _lines_before(self, offset: int) -> int:
        # Only when a block goes line by line (mostly on the way to an error message).
        count, left = 0, offset
        with self.path.open("rb") as handle:
            while left > 0:
                data = handle.read(min(left, _BLOCK_BYTES))
                if not data:
                    break
                count += data.count(b"\n")
                left -= len(data)
        return count


def record_problem(obj: Any) -> str | None:
    """What is wrong with one parsed line as a request record (docs/records.md), or None."""
    if not isinstance(obj, dict):
        return "expected a JSON object"
    for name in REQUIRED_FIELDS:
        if name not in obj:
            return f"missing field {name!r}"
    for name in FLOAT_FIELDS:
        value = obj[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{name} must be a number or null"
    if obj["planned_at"] is None:
        return "planned_at must be a number"
    for name in _STRING_FIELDS:
        if not isinstance(obj[name], str):
            return f"{name} must be a string"
    times, tokens = obj["chunk_times"], obj["chunk_tokens"]
    if not isinstance(times, list) or not isinstance(tokens, list):
        return "chunk_times and chunk_tokens must be lists"
    if len(times) != len(tokens):
        return "chunk_tokens must have the same length as chunk_times"
    return None


def _proven_complete(table: pa.Table, data: bytes, end: int) -> bool:
    """Whether pyarrow's table is what every line says: the JSON reader reads a missing key
    as null, so a null where the key is required sends the block line by line, and a line with
    a null in a nullable field is looked at to see that the key is there."""
    import pyarrow.compute as pc

    if any(table.column(name).null_count for name in NOT_NULL_FIELDS):
        return False
    times, tokens = table.column("chunk_times"), table.column("chunk_tokens")
    if not pc.all(pc.equal(pc.list_value_length(times), pc.list_value_length(tokens))).as_py():
        return False
    nulls = [name for name in NULLABLE_FIELDS if table.column(name).null_count]
    if not nulls:
        return True
    rows = pc.is_null(table.column(nulls[0]))
    for name in nulls[1:]:
        rows = pc.or_(rows, pc.is_null(table.column(name)))
    lines = _lines_at(data, end, pc.indices_nonzero(rows).to_pylist(), table.num_rows)
    if lines is None:
        return False
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict) or not obj.keys() >= _REQUIRED_KEYS:
            return False
    return True


def _lines_at(data: bytes, end: int, rows: list[int], num_rows: int) -> list[bytes] | None:
    """The lines of table rows `rows` (increasing); None when that cannot be told (then the
    caller goes line by line). pyarrow skips blank lines, so rows are lines only when the block
    has as many newlines as rows; numpy finds them (a block's 37k lines one by one in Python,
    or bytes.count, took twice as long)."""
    view = np.frombuffer(data, dtype=np.uint8, count=end)
    # Slices that stay in cache: a whole block's comparison would touch 32 MB of fresh memory.
    newlines = np.concatenate(
        [np.flatnonzero(view[start : start + _SCAN_BYTES] == 10) + start
         for start in range(0, end, _SCAN_BYTES)] or [np.zeros(0, dtype=np.intp)]
    )  # fmt: skip
    if len(newlines) != num_rows:
        return _lines_past_blanks(data, end, rows)
    if rows and rows[-1] >= num_rows:
        return None
    out = []
    for row in rows:
        start = int(newlines[row - 1]) + 1 if row else 0
        out.append(data[start : int(newlines[row])])
    return out


def _lines_past_blanks(data: bytes, end: int, rows: list[int]) -> list[bytes] | None:
    # Line by line, skipping the blank lines pyarrow skips.
    find = data.find
    wanted = iter(rows)
    target = next(wanted, None)
    out = []
    row, pos = 0, 0
    while target is not None and pos < end:
        stop = find(b"\n", pos, end)
        # A record line is long; only a short one can be blank.
        if stop - pos < 16 and not data[pos:stop].strip():
            pos = stop + 1
            continue
        if row == target:
            out.append(data[pos:stop])
            target = next(wanted, None)
        row += 1
        pos = stop + 1
    return out if target is None else None
