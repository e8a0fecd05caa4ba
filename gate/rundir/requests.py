"""Fast reader of `requests.jsonl` (docs/records.md) into numpy columns.

Owns turning request records into arrays: times as float64 seconds (NaN for null), categorical
fields (status, stage, priority, length class, endpoint) as small integer codes with their names,
and per-token ITL gaps (computed block by block through `gate.rundir.gaps.itl_gaps`, so a million
records with 32 chunks each never exist as Python floats all at once). It tolerates a partial
final line and reports it; any other unreadable line is a RecordsError with its line number. When
the load generator left a matching columnar mirror (`gate.rundir.columns`), it reads that
instead of parsing. It does not know what the columns mean for a gate.
"""

from __future__ import annotations

import gc
import itertools
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gate.errors import BatchgateError, ExitCode
from gate.rundir.columns import CATEGORICAL_FIELDS, FLOAT_FIELDS, read_mirror
from gate.rundir.gaps import itl_gaps

__all__ = ["Categorical", "RecordsError", "RequestColumns", "read_requests"]

_BLOCK_BYTES = 16 * 1024 * 1024
_FLOAT_FIELDS = FLOAT_FIELDS
# Optional in a JSONL record (older records lack them), read apart from the others, with the
# value an older record meant: `endpoint` chat; `chunk_tokens_source` assumed (one token a chunk).
_OPTIONAL_FIELDS = {"endpoint": "chat", "chunk_tokens_source": "assumed"}
_CATEGORICAL_FIELDS = tuple(f for f in CATEGORICAL_FIELDS if f not in _OPTIONAL_FIELDS)
_get_floats = itemgetter(*_FLOAT_FIELDS)
_get_categoricals = itemgetter(*_CATEGORICAL_FIELDS)
_get_chunk_times = itemgetter("chunk_times")
_get_chunk_tokens = itemgetter("chunk_tokens")


class RecordsError(BatchgateError, ValueError):
    """An unreadable request record; the message names the file and line."""

    default_exit_code = ExitCode.NO_DATA


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

    @property
    def n(self) -> int:
        return len(self.planned_at)


class _Codes:
    def __init__(self) -> None:
        self.table: dict[str, int] = {}
        self.parts: list[np.ndarray] = []

    def add(self, values: Any) -> None:
        table = self.table
        for name in dict.fromkeys(values):  # the few distinct names, in C
            table.setdefault(name, len(table))
        codes = np.fromiter(map(table.__getitem__, values), dtype=np.int16, count=len(values))
        self.parts.append(codes)

    def build(self) -> Categorical:
        codes = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int16)
        return Categorical(codes=codes, names=tuple(str(k) for k in self.table))


_CACHE_VERSION = 2
_ARRAY_FIELDS = (*_FLOAT_FIELDS, "itl_seconds", "itl_counts")


def read_requests(path: str | Path, *, max_records: int | None = None) -> RequestColumns:
    """Read one requests.jsonl; raises RecordsError (with line number) on a corrupt line.

    `max_records` reads only the file's first that-many lines (complete lines: what a reader
    saw of a file still being written, see `gate.rundir.abort`); it skips the mirror.

    A columnar mirror written by the load generator (docs/records.md, `requests.columns/`) is
    used when its stamp matches the file: it is the one column format of a run (a run without
    it, e.g. one that crashed before its clean close, is parsed on every read).
    """
    path = Path(path)
    mirrored = None if max_records is not None else read_mirror(path)
    if mirrored is not None:
        for name in CATEGORICAL_FIELDS:
            codes, names = mirrored[name]
            mirrored[name] = Categorical(codes=codes, names=names)
        return RequestColumns(path=str(path), **mirrored)
    # Parsing creates millions of short-lived containers; the cyclic collector would rescan
    # them over and over (it doubles the parse time) and none of them form cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(path, max_records)
    finally:
        if was_enabled:
            gc.enable()


def _read(path: Path, max_records: int | None = None) -> RequestColumns:
    floats: list[np.ndarray] = []
    itl_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    categoricals = {name: _Codes() for name in CATEGORICAL_FIELDS}
    partial = False
    first_line = 1
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise RecordsError(f"{path}: cannot read: {exc}") from None
    with handle:
        pending = handle.readlines(_BLOCK_BYTES)
        while pending:
            lines = pending
            pending = handle.readlines(_BLOCK_BYTES)
            if max_records is not None and first_line - 1 + len(lines) >= max_records:
                lines, pending = lines[: max_records - first_line + 1], []
            if not pending and lines and not lines[-1].endswith(b"\n"):
                # A writer killed mid-line leaves this; records.md says skip it and say so.
                try:
                    orjson.loads(lines[-1])
                except orjson.JSONDecodeError:
                    lines = lines[:-1]
                    partial = True
            objects = _parse_block(lines, path, first_line)
            first_line += len(lines)
            if not objects:
                continue
            try:
                floats.append(np.array(list(map(_get_floats, objects)), dtype=np.float64))
                cats = list(zip(*map(_get_categoricals, objects), strict=True))
                for name, values in zip(_CATEGORICAL_FIELDS, cats, strict=True):
                    categoricals[name].add(values)
                for name, default in _OPTIONAL_FIELDS.items():
                    categoricals[name].add([o.get(name, default) for o in objects])
                chunk_times = list(map(_get_chunk_times, objects))
                chunk_tokens = list(map(_get_chunk_tokens, objects))
            except (KeyError, TypeError, ValueError) as exc:
                raise _locate_bad_record(objects, path, first_line - len(lines), exc) from None
            try:
                gaps, counts = _block_itl(chunk_times, chunk_tokens)
            except (RecordsError, TypeError, ValueError) as exc:
                start = first_line - len(lines)
                raise RecordsError(f"{path}: records from line {start}: {exc}") from None
            itl_parts.append(gaps)
            count_parts.append(counts)
    table = np.concatenate(floats) if floats else np.zeros((0, len(_FLOAT_FIELDS)))
    columns = {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(_FLOAT_FIELDS)}
    return RequestColumns(
        path=str(path),
        **columns,
        **{name: codes.build() for name, codes in categoricals.items()},
        itl_seconds=np.concatenate(itl_parts) if itl_parts else np.zeros(0, dtype=np.float32),
        itl_counts=np.concatenate(count_parts) if count_parts else np.zeros(0, dtype=np.int64),
        partial_last_line=partial,
    )


def _parse_block(lines: list[bytes], path: Path, first_line: int) -> list[dict[str, Any]]:
    try:
        objects = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        objects = []
        for offset, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                objects.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise RecordsError(
                    f"{path}:{first_line + offset}: not a JSON object: {exc}"
                ) from None
        return objects
    # A line that is JSON but not an object fails field extraction with TypeError, which
    # `_locate_bad_record` turns into a message with its line number.
    return objects


def _locate_bad_record(
    objects: list[dict[str, Any]], path: Path, first_line: int, exc: Exception
) -> RecordsError:
    required = (*_FLOAT_FIELDS, *_CATEGORICAL_FIELDS, "chunk_times", "chunk_tokens")
    for offset, obj in enumerate(objects):
        if not isinstance(obj, dict):
            return RecordsError(f"{path}:{first_line + offset}: expected a JSON object")
        for name in required:
            if name not in obj:
                return RecordsError(f"{path}:{first_line + offset}: missing field {name!r}")
        for name in _FLOAT_FIELDS:
            value = obj[name]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                return RecordsError(
                    f"{path}:{first_line + offset}: {name} must be a number or null"
                )
        for name in _CATEGORICAL_FIELDS:
            if not isinstance(obj[name], str):
                return RecordsError(f"{path}:{first_line + offset}: {name} must be a string")
    return RecordsError(f"{path}: unreadable records near line {first_line}: {exc}")


def _block_itl(
    chunk_times: list[list[float]], chunk_tokens: list[list[int]]
) -> tuple[np.ndarray, np.ndarray]:
    num_chunks = np.fromiter(map(len, chunk_times), dtype=np.int64, count=len(chunk_times))
    total = int(num_chunks.sum())
    times = np.fromiter(itertools.chain.from_iterable(chunk_times), dtype=np.float64, count=total)
    token_lengths = np.fromiter(map(len, chunk_tokens), dtype=np.int64, count=len(chunk_tokens))
    if not np.array_equal(token_lengths, num_chunks):
        raise RecordsError("chunk_tokens must have the same length as chunk_times in every record")
    # Equal sums mean one token per chunk unless a zero-token chunk pairs with a multi-token one,
    # which a content chunk (it carries generated text) cannot be.
    token_sums = np.fromiter(map(sum, chunk_tokens), dtype=np.float64, count=len(chunk_tokens))
    if np.array_equal(token_sums, num_chunks):
        # Every chunk carries one token (the common streaming case): skip flattening them.
        tokens = None
    else:
        tokens = np.fromiter(
            itertools.chain.from_iterable(chunk_tokens), dtype=np.int64, count=total
        )
    return itl_gaps(times, tokens, num_chunks)
