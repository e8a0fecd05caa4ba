"""The request-record format both products import (batchgate_records): the schema is the one
docs/records.md documents, a record the load generator writes carries every field of it in order,
and DuckDB's read proves one row a line or says why not. (That it imports neither product:
tests/gate/test_import_boundaries.py.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from batchgate_records import scan
from batchgate_records.scan import LineScan, ScanFailed, newline_offsets
from batchgate_records.schema import (
    OPTIONAL_DEFAULTS,
    REQUIRED_FIELDS,
    jsonl_stamp,
    jsonl_tail,
    requests_schema,
    stamp_matches,
    with_defaults,
)
from loadgen.records import RequestRecord

REPO = Path(__file__).resolve().parents[2]


def _record(i: int) -> dict:
    return RequestRecord(
        id=f"0-{i}", profile="steady", stage="main", priority="interactive", length_class="short",
        endpoint="chat", stream=True, max_tokens=4, planned_at=10.0 + i, sent_at=10.0 + i,
        first_token_at=10.1 + i, done_at=10.3 + i, chunk_times=[10.1 + i, 10.2 + i],
        chunk_tokens=[1, 1], prompt_tokens=5, output_tokens=2, http_status=200,
    ).to_dict()  # fmt: skip


def _jsonl(path: Path, n: int) -> Path:
    path.write_bytes(b"".join(orjson.dumps(_record(i)) + b"\n" for i in range(n)))
    return path


def test_the_schema_is_the_one_docs_records_md_documents():
    text = (REPO / "docs" / "records.md").read_text()
    section = text.split("## `requests.parquet`", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", section, flags=re.M)
    assert documented == [(f.name, str(f.type)) for f in requests_schema()]


def test_the_writers_record_carries_every_field_in_the_schemas_order():
    assert list(_record(0)) == requests_schema().names
    assert set(REQUIRED_FIELDS) <= set(requests_schema().names)


def test_with_defaults_fills_what_an_older_record_meant():
    schema = requests_schema()
    row = {**_record(0), "endpoint": None, "chunk_tokens_source": None}
    table = with_defaults(pa.Table.from_pylist([row, _record(1)], schema=schema))
    for name, default in OPTIONAL_DEFAULTS.items():
        assert table.column(name).to_pylist()[0] == default


def test_the_stamp_stands_for_the_jsonl_until_it_changes(tmp_path):
    path = _jsonl(tmp_path / "requests.jsonl", 3)
    size, tail = jsonl_tail(path)
    stamp = jsonl_stamp(size, tail, partial_last_line=False)
    assert stamp_matches(stamp, path)
    with path.open("ab") as handle:
        handle.write(orjson.dumps(_record(3)) + b"\n")
    assert not stamp_matches(stamp, path)


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_newline_offsets_across_read_blocks(tmp_path, monkeypatch, block):
    monkeypatch.setattr(scan, "_BLOCK_BYTES", block)
    data = bytes(np.random.default_rng(block).choice([10, 65, 123], size=20_000))
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    expected = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    assert np.array_equal(newline_offsets(path, len(data)), expected)
    # Only the first `size` bytes (what the scan read), and a file cut short is an error.
    assert np.array_equal(newline_offsets(path, 999), expected[expected < 999])
    with pytest.raises(OSError, match="ended at byte"):
        newline_offsets(path, len(data) + 5)


@pytest.mark.parametrize("count_beside", [False, True])
def test_the_scan_gives_one_row_a_line_in_order(tmp_path, monkeypatch, count_beside):
    pytest.importorskip("duckdb")
    monkeypatch.setattr(scan, "_BATCH_ROWS", 4)  # several tables
    path = _jsonl(tmp_path / "requests.jsonl", 10)
    read = LineScan(path, requests_schema(), path.stat().st_size, count_beside=count_beside)
    table = pa.concat_tables(list(read.tables()))
    assert table.column("id").to_pylist() == [f"0-{i}" for i in range(10)]
    assert table.to_pylist() == [_record(i) for i in range(10)]
    assert read.newlines is not None and len(read.newlines) == 10


def test_a_last_record_without_newline_counts_only_when_said(tmp_path):
    pytest.importorskip("duckdb")
    path = _jsonl(tmp_path / "requests.jsonl", 3)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    size = path.stat().st_size
    assert len(list(LineScan(path, requests_schema(), size, ends_in_record=True).tables())) == 1
    with pytest.raises(ScanFailed, match="3 rows for 2 lines"):
        list(LineScan(path, requests_schema(), size).tables())


@pytest.mark.parametrize("count_beside", [False, True])
def test_what_the_scan_cannot_stand_for_raises_scan_failed(tmp_path, monkeypatch, count_beside):
    pytest.importorskip("duckdb")

    def read(path: Path) -> list[pa.Table]:
        size = path.stat().st_size
        return list(LineScan(path, requests_schema(), size, count_beside=count_beside).tables())

    blank = _jsonl(tmp_path / "blank.jsonl", 4)
    lines = blank.read_bytes().split(b"\n")
    blank.write_bytes(b"\n".join([*lines[:2], b"", *lines[2:]]))
    with pytest.raises(ScanFailed, match="4 rows for 5 lines"):
        read(blank)
    bad = _jsonl(tmp_path / "bad.jsonl", 4)
    bad.write_bytes(bad.read_bytes().replace(b'"planned_at":11.0', b'"planned_at":"soon"'))
    with pytest.raises(ScanFailed, match="DuckDB"):
        read(bad)
    (tmp_path / "steady[1]").mkdir()
    with pytest.raises(ScanFailed, match="glob"):
        read(_jsonl(tmp_path / "steady[1]" / "requests.jsonl", 2))
    with monkeypatch.context() as patch:
        patch.setattr(scan, "_size", lambda path: -1)
        with pytest.raises(ScanFailed, match="changed"):
            read(_jsonl(tmp_path / "ok.jsonl", 2))
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "duckdb", None)  # import duckdb raises ImportError
        with pytest.raises(ScanFailed, match="does not import"):
            read(_jsonl(tmp_path / "ok.jsonl", 2))
