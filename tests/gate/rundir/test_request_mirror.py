"""The gate reads the load generator's columnar mirror (docs/records.md, `requests.columns/`)
exactly as it would the JSONL, and only when the mirror's stamp matches the JSONL.

The mirror here is built by hand from the documented layout, not by `loadgen` (the gate never
imports it); tests/loadgen/test_request_columns.py checks the writer against the same text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from gate.rundir.columns import read_mirror
from gate.rundir.requests import read_requests

FLOATS = (
    "planned_at",
    "sent_at",
    "first_token_at",
    "done_at",
    "prompt_tokens",
    "output_tokens",
    "http_status",
)
CATEGORICALS = ("status", "stage", "priority", "length_class", "endpoint", "chunk_tokens_source")
SOURCES = ("usage", "assumed", "mixed")


def _records(*, with_source: bool = True) -> list[dict]:
    records = []
    for i in range(40):
        failed = i % 7 == 3
        first = 10.0 + i + 0.1
        times = [] if failed else [round(first + 0.013 * k * (1 + i % 3), 6) for k in range(5)]
        tokens = [] if failed else ([1, 1, 2, 1, 3] if i % 5 == 0 else [1] * 5)
        records.append(
            {
                "id": f"0-{i}",
                "profile": "steady",
                "stage": "main" if i < 20 else "spike",
                "priority": "batch" if i % 2 else "interactive",
                "length_class": "long" if i % 4 == 0 else "short",
                "endpoint": "completions" if i % 6 == 0 else "chat",
                "stream": True,
                "max_tokens": 8,
                "planned_at": 10.0 + i,
                "sent_at": 10.0 + i + 0.001,
                "first_token_at": None if failed else first,
                "done_at": 10.0 + i + 0.5,
                "chunk_times": times,
                "chunk_tokens": tokens,
                "prompt_tokens": 12,
                "output_tokens": None if failed else sum(tokens),
                "tokens_source": "usage",
                "status": "http_error" if failed else "ok",
                "http_status": 503 if failed else 200,
                "finish_reason": None if failed else "length",
                "error": "overloaded" if failed else None,
                "worker": 0,
            }
        )
        if with_source:
            records[-1]["chunk_tokens_source"] = SOURCES[i % 3]
    return records


def _write_run(directory: Path, records: list[dict], *, version: int = 2) -> Path:
    """The mirror as docs/records.md lays it out; version 1 (older runs) has no
    `chunk_tokens_source`."""
    categoricals = CATEGORICALS if version >= 2 else CATEGORICALS[:-1]
    path = directory / "requests.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    mirror = directory / "requests.columns"
    mirror.mkdir()
    nan = float("nan")
    for name in FLOATS:
        values = [nan if r[name] is None else r[name] for r in records]
        np.save(mirror / f"{name}.npy", np.array(values, dtype="<f8"))
    names: dict[str, list[str]] = {}
    for name in categoricals:
        table: dict[str, int] = {}
        codes = [table.setdefault(r[name], len(table)) for r in records]
        np.save(mirror / f"{name}.npy", np.array(codes, dtype="<i2"))
        names[name] = list(table)
    np.save(mirror / "num_chunks.npy", np.array([len(r["chunk_times"]) for r in records], "<i8"))
    np.save(
        mirror / "chunk_times.npy", np.array([t for r in records for t in r["chunk_times"]], "<f8")
    )
    np.save(
        mirror / "chunk_tokens.npy",
        np.array([k for r in records for k in r["chunk_tokens"]], "<i4"),
    )
    stamp = {
        "format": "batchgate.request_columns",
        "version": version,
        "jsonl_bytes": path.stat().st_size,
        "records": len(records),
        "names": names,
    }
    (mirror / "stamp.json").write_bytes(orjson.dumps(stamp))
    return path


def _decoded(columns) -> dict:
    out = {name: getattr(columns, name) for name in (*FLOATS, "itl_seconds", "itl_counts")}
    for name in CATEGORICALS:
        cat = getattr(columns, name)
        out[name] = [cat.names[c] for c in cat.codes]
    return out


def _assert_same(a, b) -> None:
    for key, value in _decoded(a).items():
        other = _decoded(b)[key]
        if isinstance(value, list):
            assert value == other, key
        else:
            np.testing.assert_array_equal(np.asarray(value), np.asarray(other), err_msg=key)


def test_mirror_gives_the_same_columns_as_parsing_the_jsonl(tmp_path: Path) -> None:
    path = _write_run(tmp_path, _records())
    assert read_mirror(path) is not None
    from_mirror = read_requests(path)
    hidden = tmp_path / "hidden"
    (tmp_path / "requests.columns").rename(hidden)
    from_jsonl = read_requests(path)
    assert from_mirror.n == from_jsonl.n == 40
    _assert_same(from_mirror, from_jsonl)


def test_an_older_run_without_chunk_tokens_source_reads_as_assumed(tmp_path: Path) -> None:
    path = _write_run(tmp_path, _records(with_source=False), version=1)
    assert read_mirror(path) is not None
    from_mirror = read_requests(path)
    (tmp_path / "requests.columns").rename(tmp_path / "hidden")
    from_jsonl = read_requests(path)
    _assert_same(from_mirror, from_jsonl)
    assert _decoded(from_mirror)["chunk_tokens_source"] == ["assumed"] * 40


def test_mirror_is_ignored_once_the_jsonl_grew(tmp_path: Path) -> None:
    records = _records()
    path = _write_run(tmp_path, records[:-1])
    with path.open("ab") as handle:
        handle.write(orjson.dumps(records[-1]) + b"\n")
    assert read_mirror(path) is None
    assert read_requests(path).n == 40


def test_mirror_with_a_line_count_that_differs_is_ignored(tmp_path: Path) -> None:
    path = _write_run(tmp_path, _records())
    stamp_path = tmp_path / "requests.columns" / "stamp.json"
    stamp = orjson.loads(stamp_path.read_bytes())
    np.save(tmp_path / "requests.columns" / "planned_at.npy", np.zeros(39))
    stamp["records"] = 39
    stamp_path.write_bytes(orjson.dumps(stamp))
    columns = read_requests(path)
    assert columns.n == 40 and columns.planned_at[0] == 10.0


def test_mirror_with_a_wrong_dtype_or_format_is_ignored(tmp_path: Path) -> None:
    path = _write_run(tmp_path, _records())
    np.save(tmp_path / "requests.columns" / "planned_at.npy", np.zeros(40, dtype="<f4"))
    assert read_requests(path).planned_at[0] == 10.0
    stamp_path = tmp_path / "requests.columns" / "stamp.json"
    stamp = orjson.loads(stamp_path.read_bytes())
    np.save(tmp_path / "requests.columns" / "planned_at.npy", np.zeros(40, dtype="<f8"))
    stamp["version"] = 3
    stamp_path.write_bytes(orjson.dumps(stamp))
    assert read_requests(path).planned_at[0] == 10.0


def test_mirror_of_other_records_with_the_same_byte_size_is_ignored(tmp_path: Path) -> None:
    path = _write_run(tmp_path, _records())
    data = path.read_bytes()
    head, last = data[:-1].rsplit(b"\n", 1)
    assert b'"planned_at":49.0' in last
    path.write_bytes(
        head + b"\n" + last.replace(b'"planned_at":49.0', b'"planned_at":48.0') + b"\n"
    )
    assert read_mirror(path) is None
    assert read_requests(path).planned_at[-1] == 48.0
