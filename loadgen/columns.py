"""The columnar mirror of `requests.jsonl` (docs/records.md, `requests.columns/`).

Owns accumulating, record by record as the writer appends lines, the columns a reader needs
(clocks, token counts, categorical fields as codes, chunk times and tokens back to back) and
writing them as `.npy` files plus a stamp (byte size and line count of the JSONL they mirror)
when the writer closes; and `validate_columns`, which checks a mirror against docs/records.md
for the tests. The JSONL stays the source of truth: a mirror whose stamp does not match is
ignored by readers. It does not know what the columns mean (no derived metrics here).
"""

from __future__ import annotations

import shutil
from array import array
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "COLUMNS_FORMAT",
    "COLUMNS_VERSION",
    "ColumnMirror",
    "columns_dir",
    "validate_columns",
]

COLUMNS_FORMAT = "batchgate.request_columns"
COLUMNS_VERSION = 2  # 2 added `chunk_tokens_source`
FLOAT_FIELDS = (
    "planned_at",
    "sent_at",
    "first_token_at",
    "done_at",
    "prompt_tokens",
    "output_tokens",
    "http_status",
)
CATEGORICAL_FIELDS = (
    "status",
    "stage",
    "priority",
    "length_class",
    "endpoint",
    "chunk_tokens_source",
)
_DTYPES = {
    **{name: "<f8" for name in FLOAT_FIELDS},
    **{name: "<i2" for name in CATEGORICAL_FIELDS},
    "num_chunks": "<i8",
    "chunk_times": "<f8",
    "chunk_tokens": "<i4",
}
_NAN = float("nan")


def columns_dir(jsonl_path: str | Path) -> Path:
    """`<profile>/requests.columns/` next to `<profile>/requests.jsonl`."""
    path = Path(jsonl_path)
    return path.with_name(f"{path.stem}.columns")


class ColumnMirror:
    """Columns of every record written so far, in line order (about 12 bytes per chunk)."""

    def __init__(self) -> None:
        self.floats = {name: array("d") for name in FLOAT_FIELDS}
        self.codes = {name: array("h") for name in CATEGORICAL_FIELDS}
        self.names: dict[str, dict[str, int]] = {name: {} for name in CATEGORICAL_FIELDS}
        self.num_chunks = array("q")
        self.chunk_times = array("d")
        self.chunk_tokens = array("i")
        self.count = 0

    def add(self, obj: dict[str, Any]) -> None:
        """Append one record (the dict exactly as written to the JSONL line)."""
        for name, column in self.floats.items():
            value = obj[name]
            column.append(_NAN if value is None else value)
        for name, column in self.codes.items():
            table = self.names[name]
            column.append(table.setdefault(obj[name], len(table)))
        self.num_chunks.append(len(obj["chunk_times"]))
        self.chunk_times.extend(obj["chunk_times"])
        self.chunk_tokens.extend(obj["chunk_tokens"])
        self.count += 1

    def write(self, jsonl_path: str | Path) -> Path:
        """Write the mirror beside `jsonl_path` (already closed); the stamp goes last."""
        import numpy as np  # here, not at import: the load process needs it only at the end

        jsonl_path = Path(jsonl_path)
        directory = columns_dir(jsonl_path)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        columns: dict[str, array] = {
            **self.floats,
            **self.codes,
            "num_chunks": self.num_chunks,
            "chunk_times": self.chunk_times,
            "chunk_tokens": self.chunk_tokens,
        }
        for name, column in columns.items():
            np.save(directory / f"{name}.npy", np.frombuffer(column, dtype=_DTYPES[name]))
        stamp = {
            "format": COLUMNS_FORMAT,
            "version": COLUMNS_VERSION,
            "jsonl_bytes": jsonl_path.stat().st_size,
            "records": self.count,
            "names": {name: list(table) for name, table in self.names.items()},
        }
        (directory / "stamp.json").write_bytes(orjson.dumps(stamp))
        return directory


def validate_columns(directory: str | Path, jsonl_path: str | Path) -> list[str]:
    """Problems of a mirror against docs/records.md and the JSONL it mirrors; empty when valid."""
    import numpy as np

    directory, jsonl_path = Path(directory), Path(jsonl_path)
    try:
        stamp = orjson.loads((directory / "stamp.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return [f"stamp.json unreadable: {exc}"]
    problems = []
    expected_keys = {"format", "version", "jsonl_bytes", "records", "names"}
    if not isinstance(stamp, dict) or set(stamp) != expected_keys:
        return [f"stamp.json needs exactly {sorted(expected_keys)}"]
    if stamp["format"] != COLUMNS_FORMAT or stamp["version"] != COLUMNS_VERSION:
        problems.append("stamp format/version differ")
    data = jsonl_path.read_bytes()
    if stamp["jsonl_bytes"] != len(data) or stamp["records"] != data.count(b"\n"):
        problems.append("stamp does not match the JSONL's byte size and line count")
    if set(stamp["names"]) != set(CATEGORICAL_FIELDS):
        problems.append("names must list every categorical field")
    n = stamp["records"]
    arrays = {}
    for name, dtype in _DTYPES.items():
        try:
            arrays[name] = np.load(directory / f"{name}.npy")
        except (OSError, ValueError) as exc:
            problems.append(f"{name}.npy unreadable: {exc}")
            continue
        if arrays[name].dtype != np.dtype(dtype) or arrays[name].ndim != 1:
            problems.append(f"{name}.npy must be 1-d {dtype}")
    if problems:
        return problems
    for name in (*FLOAT_FIELDS, *CATEGORICAL_FIELDS, "num_chunks"):
        if len(arrays[name]) != n:
            problems.append(f"{name}.npy has {len(arrays[name])} rows, not {n}")
    total = int(arrays["num_chunks"].sum())
    for name in ("chunk_times", "chunk_tokens"):
        if len(arrays[name]) != total:
            problems.append(f"{name}.npy has {len(arrays[name])} entries, not sum(num_chunks)")
    for name in CATEGORICAL_FIELDS:
        codes = arrays[name]
        if len(codes) and (codes.min() < 0 or codes.max() >= len(stamp["names"][name])):
            problems.append(f"{name}.npy has codes outside names.{name}")
    return problems
