"""Reading the load generator's columnar mirror of `requests.jsonl` (docs/records.md,
`requests.columns/`) into request columns, instead of parsing the JSONL.

Owns the reader's side of that contract: the mirror is used only when its stamp names the
format and a version this module reads (2; or 1, from before `chunk_tokens_source`, whose records
read as `assumed`) and the JSONL's current byte size, every array has the documented dtype and
the stamp's record count as length, and the JSONL's first and last lines agree with the first
and last rows (counting the lines would cost a full read); otherwise
`read_mirror` returns None and the caller parses the JSONL (the source of truth). Per-token ITL
gaps are computed block by block through `gate.rundir.gaps.itl_gaps`, as for the JSONL. It does
not parse JSONL (`gate.rundir.requests`) and never imports the writer (`loadgen`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gate.rundir.gaps import itl_gaps

__all__ = [
    "CATEGORICAL_FIELDS",
    "FLOAT_FIELDS",
    "MIRROR_FORMAT",
    "MIRROR_VERSION",
    "mirror_dir",
    "read_mirror",
]

MIRROR_FORMAT = "batchgate.request_columns"
MIRROR_VERSION = 2
# Version 1 mirrors (older runs) lack `chunk_tokens_source`: their records read as "assumed".
_READABLE_VERSIONS = (1, 2)
# The request record's numeric and categorical fields (docs/records.md): one list for both readers.
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
_ADDED_IN_2 = ("chunk_tokens_source",)
_DTYPES = {
    **{name: "<f8" for name in FLOAT_FIELDS},
    **{name: "<i2" for name in CATEGORICAL_FIELDS},
    "num_chunks": "<i8",
    "chunk_times": "<f8",
    "chunk_tokens": "<i4",
}
_BLOCK_RECORDS = 65_536  # ~2M chunks a block: bounds the temporaries of itl_gaps
_TAIL_BYTES = 1024 * 1024
_SPOT_FIELDS = ("planned_at", "sent_at", "first_token_at", "done_at")


def mirror_dir(jsonl_path: Path) -> Path:
    return jsonl_path.with_name(f"{jsonl_path.stem}.columns")


def _ends_agree(jsonl_path: Path, arrays: dict[str, np.ndarray], n: int) -> bool:
    """Line 1 and line n of the JSONL carry the clocks and chunk count of rows 0 and n - 1."""
    if n == 0:
        return True  # the byte size (0) already matched
    with jsonl_path.open("rb") as handle:
        first = handle.readline()
        size = handle.seek(0, 2)
        handle.seek(max(size - _TAIL_BYTES, 0))
        tail = handle.read()
    if not tail.endswith(b"\n"):
        return False
    last = tail[:-1].rsplit(b"\n", 1)[-1]
    for row, line in ((0, first), (n - 1, last)):
        record = orjson.loads(line)
        for name in _SPOT_FIELDS:
            value, mirrored = record[name], float(arrays[name][row])
            if (math.isnan(mirrored) and value is not None) or (
                not math.isnan(mirrored) and value != mirrored
            ):
                return False
        if len(record["chunk_times"]) != int(arrays["num_chunks"][row]):
            return False
    return True


def read_mirror(jsonl_path: Path) -> dict[str, Any] | None:
    """The mirror's columns as keyword arguments of `RequestColumns` (less `path`), or None
    when there is no mirror or it does not match the JSONL exactly."""
    directory = mirror_dir(jsonl_path)
    try:
        stamp = orjson.loads((directory / "stamp.json").read_bytes())
        if not isinstance(stamp, dict) or stamp.get("format") != MIRROR_FORMAT:
            return None
        version = stamp.get("version")
        if version not in _READABLE_VERSIONS:
            return None
        n = stamp["records"]
        if stamp["jsonl_bytes"] != jsonl_path.stat().st_size:
            return None
        present = [k for k in _DTYPES if version >= 2 or k not in _ADDED_IN_2]
        arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in present}
        names = {
            name: tuple(str(v) for v in stamp["names"][name])
            for name in CATEGORICAL_FIELDS
            if name in arrays
        }
        for name in CATEGORICAL_FIELDS:
            if name not in arrays:  # a version 1 mirror: one code, "assumed", for every record
                arrays[name], names[name] = np.zeros(n, dtype=_DTYPES[name]), ("assumed",)
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    for name, array in arrays.items():
        if array.dtype != np.dtype(_DTYPES[name]) or array.ndim != 1:
            return None
    num_chunks = arrays["num_chunks"]
    if any(len(arrays[k]) != n for k in (*FLOAT_FIELDS, *CATEGORICAL_FIELDS, "num_chunks")):
        return None
    if n and int(num_chunks.min()) < 0:
        return None
    total = int(num_chunks.sum())
    if len(arrays["chunk_times"]) != total or len(arrays["chunk_tokens"]) != total:
        return None
    try:
        if not _ends_agree(jsonl_path, arrays, n):
            return None
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    for name in CATEGORICAL_FIELDS:
        codes = arrays[name]
        if n and (int(codes.min()) < 0 or int(codes.max()) >= len(names[name])):
            return None
    gaps, counts = _itl(arrays["chunk_times"], arrays["chunk_tokens"], num_chunks)
    return {
        **{name: np.array(arrays[name]) for name in FLOAT_FIELDS},
        **{name: (np.array(arrays[name]), names[name]) for name in CATEGORICAL_FIELDS},
        "itl_seconds": gaps,
        "itl_counts": counts,
    }


def _itl(
    times: np.ndarray, tokens: np.ndarray, num_chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum(num_chunks)
    gap_parts, count_parts = [], []
    for start in range(0, len(num_chunks), _BLOCK_RECORDS):
        stop = min(start + _BLOCK_RECORDS, len(num_chunks))
        lo = int(ends[start - 1]) if start else 0
        hi = int(ends[stop - 1]) if stop else 0
        block_chunks = np.asarray(num_chunks[start:stop])
        block_tokens = np.asarray(tokens[lo:hi])
        # The JSONL reader's rule: when every record's token sum equals its chunk count, every
        # chunk counts as one token (a content chunk cannot carry zero tokens).
        one_each = len(block_tokens) == 0 or block_tokens.min() == block_tokens.max() == 1
        if not one_each:
            sums = np.concatenate(([0], np.cumsum(block_tokens, dtype=np.int64)))
            bounds = np.concatenate(([0], np.cumsum(block_chunks)))
            one_each = np.array_equal(sums[bounds[1:]] - sums[bounds[:-1]], block_chunks)
        gaps, counts = itl_gaps(
            np.asarray(times[lo:hi]),
            None if one_each else block_tokens.astype(np.int64),
            block_chunks,
        )
        gap_parts.append(gaps)
        count_parts.append(counts)
    if not gap_parts:
        return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
    return np.concatenate(gap_parts), np.concatenate(count_parts)
