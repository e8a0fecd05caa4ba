"""The observer files' JSONL (`steps.jsonl`, `scrapes.jsonl`, `gpu.jsonl`, `batch_job.jsonl`)
as lists of records, exactly (docs/records.md).

Owns parsing such a file line by line with orjson: blank lines skipped, a partial last line (a
writer stopped mid-line) skipped with a note, any other bad line an error naming it, and the
prefix view (the first `limit` lines, what an earlier reader saw). It does not know what the
records mean; steps get columns in `gate.rundir.step_records`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gate.errors import BatchgateError, ExitCode

__all__ = ["RunDirError", "read_jsonl"]


class RunDirError(BatchgateError, ValueError):
    """A run directory that cannot be read at all (the message says which file and why)."""

    default_exit_code = ExitCode.NO_DATA


def read_jsonl(
    path: Path, notes: list[str], limit: int | None = None
) -> list[dict[str, Any]] | None:
    """The file's records (None without the file); `limit`: only its first that-many lines."""
    if not path.exists():
        return None
    raw = path.read_bytes().split(b"\n")
    if limit is not None:
        raw = raw[:limit]  # the first `limit` complete lines; a later reader's exact view
    lines = [line for line in raw if line.strip()]
    try:
        records = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        records = []
        for number, line in enumerate(lines, start=1):
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                if number == len(lines) and not path.read_bytes().endswith(b"\n"):
                    notes.append(f"{path.name}: skipped a partial last line")  # writer stopped
                    continue
                raise RunDirError(f"{path}: record {number}: not a JSON object") from None
    if records and set(map(type, records)) != {dict}:
        raise RunDirError(f"{path}: every line must be a JSON object")
    return records
