"""Reading a trace file in one of the published layouts into a validated `Trace`.

Owns the field names and units of each format (Mooncake, Azure LLM inference, BurstGPT, Alibaba
Bailian, and our own `jsonl`), detecting the format from the first line, and the whole-file
validation: every line is checked before anything is returned, and the first bad one raises
ConfigError naming the file, the 1-based line (a CSV header is line 1) and the field. Timestamps
must not go backwards: a trace is replayed in file order and its indexes stay the file's lines,
so an unsorted file is refused (with the line) rather than silently reordered. It does not know
windows, scaling or sessions (`loadgen.traces.window`, `loadgen.traces.sessions`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import ConfigError
from loadgen.traces.fields import (
    LineError,
    as_count,
    as_hash_ids,
    as_id,
    as_seconds,
    parse_wall_clock_ns,
    shown,
)
from loadgen.traces.request import Trace, TraceRequest

__all__ = ["FORMATS", "detect_format", "read_trace"]

FORMATS = ("auto", "mooncake", "azure", "burstgpt", "bailian", "jsonl")
MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_JSONL_FIELDS = (
    "timestamp",
    "input_tokens",
    "output_tokens",
    "hash_ids",
    "block_tokens",
    "session",
    "turn",
    "trace_index",
)

# (line number, timestamp in the format's unit, the request's other fields)
_Row = tuple[int, Any, dict[str, Any]]


def read_trace(path: str | Path, format: str = "auto") -> Trace:
    """Read and validate a whole trace file; `format` is one of FORMATS ("auto" detects)."""
    if format not in FORMATS:
        raise ConfigError(f"format: unknown trace format {format!r}; one of {', '.join(FORMATS)}")
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"trace file {where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read trace file {where}: {exc}") from exc
    chosen = detect_format(where, text) if format == "auto" else format
    requests, skipped = _READERS[chosen](where, text)
    if not requests:
        more = f" ({skipped} rows with 0 input or output tokens were left out)" if skipped else ""
        raise ConfigError(f"trace file {where} holds no requests{more}")
    return Trace(path=where, format=chosen, requests=requests, skipped_empty=skipped)


def detect_format(where: str, text: str) -> str:
    """The format of a file from its first non-blank line: JSON keys or a CSV header. Lines
    end at "\n" only, as the readers split them: a U+2028 inside a JSON string is not a line
    break (`str.splitlines` would cut the line there)."""
    number, first = next(
        ((n, line.strip()) for n, line in enumerate(text.split("\n"), 1) if line.strip()),
        (0, ""),
    )
    if not first:
        raise ConfigError(f"trace file {where} is empty")
    suffix = Path(where).suffix or "(none)"
    if first.startswith("{"):
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError):
            raise ConfigError(
                f"{where}:{number}: not valid JSON, cannot tell the trace format"
            ) from None
        if "chat_id" in keys or "parent_chat_id" in keys:
            return "bailian"
        if {"input_length", "output_length"} <= keys:
            return "mooncake"
        if {"input_tokens", "output_tokens"} <= keys:
            return "jsonl"
        raise ConfigError(
            f"cannot tell the trace format of {where} (extension {suffix}): its first line has "
            f"keys {sorted(keys)}; mooncake needs input_length and output_length, bailian "
            "chat_id, jsonl input_tokens and output_tokens; or pass the format"
        )
    columns = {cell.strip() for cell in next(csv.reader([first]))}
    if set(_AZURE_COLUMNS) <= columns:
        return "azure"
    if set(_BURSTGPT_COLUMNS) <= columns:
        return "burstgpt"
    raise ConfigError(
        f"cannot tell the trace format of {where} (extension {suffix}): its first line "
        f"{shown(first)} is neither a JSON object nor a known CSV header (azure needs "
        f"{', '.join(_AZURE_COLUMNS)}; burstgpt needs {', '.join(_BURSTGPT_COLUMNS)}); "
        "or pass the format"
    )


def _json_lines(where: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    error = LineError(where)
    # split("\n"), not splitlines(): the latter also breaks at U+2028 inside JSON strings.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)  # 3x the standard library's speed on hash-id lists
        except ValueError as exc:
            reason = getattr(exc, "msg", str(exc))
            raise error(number, None, f"not valid JSON ({reason})") from None
        if not isinstance(obj, dict):
            raise error(number, None, f"expected a JSON object, got {type(obj).__name__}")
        yield number, obj


def _csv_rows(
    where: str, text: str, needed: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, int], list[str]]]:
    """Data rows with their line numbers and the header's column positions."""
    error = LineError(where)
    reader = csv.reader(io.StringIO(text))
    header = [cell.strip() for cell in next(reader, [])]
    missing = [name for name in needed if name not in header]
    if missing:
        raise error(1, None, f"CSV header lacks column(s) {', '.join(missing)}, got {header}")
    positions = {name: header.index(name) for name in needed}
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise error(reader.line_num, None, f"{len(row)} cells, the header has {len(header)}")
        yield reader.line_num, positions, row


def _required(error: LineError, number: int, obj: dict[str, Any], field: str) -> Any:
    if field not in obj:
        raise error(number, field, "missing")
    return obj[field]


def _finish(
    where: str, rows: list[_Row], field: str, to_seconds: Callable[[Any], float]
) -> tuple[TraceRequest, ...]:
    """Refuses backwards timestamps; rebases to the first request, in seconds."""
    error = LineError(where)
    if not rows:
        return ()
    first = previous = rows[0][1]
    done = []
    for number, stamp, fields in rows:
        if stamp < previous:
            raise error(
                number,
                field,
                f"{shown(stamp)} is earlier than the line before ({shown(previous)}): the trace "
                "must be sorted by time (sort the file by this column first)",
            )
        previous = stamp
        done.append(TraceRequest(timestamp_seconds=to_seconds(stamp - first), **fields))
    return tuple(done)


def _lengths(
    error: LineError, number: int, input_value: Any, output_value: Any, names: tuple[str, str]
) -> tuple[int, int] | None:
    """Third-party formats: None (skip, counted) for a row with 0 input or 0 output tokens."""
    input_tokens = as_count(error, number, names[0], input_value, 0)
    output_tokens = as_count(error, number, names[1], output_value, 0)
    if input_tokens == 0 or output_tokens == 0:
        return None
    return input_tokens, output_tokens


def _lengths_and_hash_ids(
    error: LineError, number: int, obj: dict[str, Any]
) -> tuple[tuple[int, int] | None, tuple[int, ...]]:
    """`input_length`, `output_length` and `hash_ids` of a Mooncake or Bailian line."""
    lengths = _lengths(
        error,
        number,
        _required(error, number, obj, "input_length"),
        _required(error, number, obj, "output_length"),
        ("input_length", "output_length"),
    )
    return lengths, as_hash_ids(error, number, "hash_ids", obj.get("hash_ids", []))


def _mooncake(where: str, text: str) -> tuple[tuple[TraceRequest, ...], int]:
    error = LineError(where)
    rows: list[_Row] = []
    skipped = 0
    for number, obj in _json_lines(where, text):
        stamp = as_seconds(
            error, number, "timestamp", _required(error, number, obj, "timestamp"), " (ms)"
        )
        lengths, hash_ids = _lengths_and_hash_ids(error, number, obj)
        if lengths is None:
            skipped += 1
            continue
        fields: dict[str, Any] = {
            "index": number - 1,
            "input_tokens": lengths[0],
            "output_tokens": lengths[1],
            "hash_ids": hash_ids,
            "block_tokens": MOONCAKE_BLOCK_TOKENS if hash_ids else None,
        }
        rows.append((number, stamp, fields))
    return _finish(where, rows, "timestamp", lambda ms: ms / 1000), skipped


def _azure(where: str, text: str) -> tuple[tuple[TraceRequest, ...], int]:
    error = LineError(where)
    rows: list[_Row] = []
    skipped = 0
    ordinals: dict[str, int] = {}
    for number, at, row in _csv_rows(where, text, _AZURE_COLUMNS):
        cell = row[at["TIMESTAMP"]]
        stamp = parse_wall_clock_ns(cell, ordinals)
        if stamp is None:
            raise error(
                number, "TIMESTAMP", f"must be like 2023-11-16 18:15:46.6805900, got {shown(cell)}"
            )
        lengths = _lengths(
            error,
            number,
            row[at["ContextTokens"]],
            row[at["GeneratedTokens"]],
            ("ContextTokens", "GeneratedTokens"),
        )
        if lengths is None:
            skipped += 1
            continue
        fields = {"index": number - 2, "input_tokens": lengths[0], "output_tokens": lengths[1]}
        rows.append((number, stamp, fields))
    return _finish(where, rows, "TIMESTAMP", lambda ns: ns / 1_000_000_000), skipped


def _burstgpt(where: str, text: str) -> tuple[tuple[TraceRequest, ...], int]:
    error = LineError(where)
    rows: list[_Row] = []
    skipped = 0
    for number, at, row in _csv_rows(where, text, _BURSTGPT_COLUMNS):
        stamp = as_seconds(error, number, "Timestamp", row[at["Timestamp"]], " (seconds)")
        lengths = _lengths(
            error,
            number,
            row[at["Request tokens"]],
            row[at["Response tokens"]],
            ("Request tokens", "Response tokens"),
        )
        if lengths is None:  # Response tokens 0: BurstGPT's failed requests
            skipped += 1
            continue
        fields = {"index": number - 2, "input_tokens": lengths[0], "output_tokens": lengths[1]}
        rows.append((number, stamp, fields))
    return _finish(where, rows, "Timestamp", float), skipped


def _bailian(where: str, text: str) -> tuple[tuple[TraceRequest, ...], int]:
    error = LineError(where)
    rows: list[_Row] = []
    skipped = 0
    session_of: dict[str, str] = {}  # chat id -> its conversation's root chat id
    for number, obj in _json_lines(where, text):
        chat_id = as_id(error, number, "chat_id", _required(error, number, obj, "chat_id"))
        parent_value = obj.get("parent_chat_id", -1)
        parent = (
            None
            if parent_value in (-1, "-1")
            else as_id(error, number, "parent_chat_id", parent_value)
        )
        stamp = as_seconds(
            error, number, "timestamp", _required(error, number, obj, "timestamp"), " (seconds)"
        )
        lengths, hash_ids = _lengths_and_hash_ids(error, number, obj)
        turn = as_count(error, number, "turn", obj["turn"], 1) - 1 if "turn" in obj else None
        # A parent missing from the file began before it: its id still names the conversation.
        session = chat_id if parent is None else session_of.get(parent, parent)
        session_of[chat_id] = session
        if lengths is None:
            skipped += 1
            continue
        fields: dict[str, Any] = {
            "index": number - 1,
            "input_tokens": lengths[0],
            "output_tokens": lengths[1],
            "hash_ids": hash_ids,
            "block_tokens": BAILIAN_BLOCK_TOKENS if hash_ids else None,
            "session": session,
            "chat_id": chat_id,
            "parent": parent,
            "turn": turn,
        }
        rows.append((number, stamp, fields))
    return _finish(where, rows, "timestamp", float), skipped


def _jsonl(where: str, text: str) -> tuple[tuple[TraceRequest, ...], int]:
    """Our own schema (docs/traces.md): strict, unknown fields are errors."""
    error = LineError(where)
    rows: list[_Row] = []
    for number, obj in _json_lines(where, text):
        unknown = sorted(set(obj) - set(_JSONL_FIELDS))
        if unknown:
            raise error(number, unknown[0], f"unknown field (known: {', '.join(_JSONL_FIELDS)})")
        stamp = as_seconds(
            error, number, "timestamp", _required(error, number, obj, "timestamp"), " (seconds)"
        )
        input_tokens = as_count(
            error, number, "input_tokens", _required(error, number, obj, "input_tokens"), 1
        )
        output_tokens = as_count(
            error, number, "output_tokens", _required(error, number, obj, "output_tokens"), 1
        )
        hash_ids = as_hash_ids(error, number, "hash_ids", obj.get("hash_ids", []))
        block_tokens = None
        if hash_ids:
            block_value = _required(error, number, obj, "block_tokens")
            block_tokens = as_count(error, number, "block_tokens", block_value, 1)
        elif "block_tokens" in obj:
            as_count(error, number, "block_tokens", obj["block_tokens"], 1)
        session = as_id(error, number, "session", obj["session"]) if "session" in obj else None
        turn = as_count(error, number, "turn", obj["turn"], 0) if "turn" in obj else None
        if "trace_index" in obj:  # informational: the replayed line of the original trace
            as_count(error, number, "trace_index", obj["trace_index"], 0)
        fields: dict[str, Any] = {
            "index": number - 1,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "hash_ids": hash_ids,
            "block_tokens": block_tokens,
            "session": session,
            "turn": turn,
        }
        rows.append((number, stamp, fields))
    return _finish(where, rows, "timestamp", float), 0


_READERS: dict[str, Callable[[str, str], tuple[tuple[TraceRequest, ...], int]]] = {
    "mooncake": _mooncake,
    "azure": _azure,
    "burstgpt": _burstgpt,
    "bailian": _bailian,
    "jsonl": _jsonl,
}
