"""The close-time writer's DuckDB read (batchgate_records.scan, through loadgen.parquet): the same
requests.parquet as pyarrow's reader writes, and pyarrow's reader wherever the scan cannot stand
(DuckDB missing or failing, a blank line, a path DuckDB would glob), even after the scan has
written tables."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from test_parquet_writer import _record

from batchgate_records import scan
from batchgate_records.scan import LineScan, ScanFailed
from batchgate_records.schema import parquet_path, requests_schema
from loadgen import parquet
from loadgen.parquet import validate_parquet, write_parquet
from loadgen.records import RecordWriter

pytest.importorskip("duckdb")


def _jsonl(path: Path, n: int = 30) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with RecordWriter(path, parquet=False) as writer:
        for i in range(n):
            writer.write(_record(i))
    return path


def _with_an_older_record(path: Path) -> Path:
    # A line of an older writer: no endpoint, no chunk_tokens_source (their defaults apply).
    lines = path.read_bytes().split(b"\n")
    record = orjson.loads(lines[3])
    del record["endpoint"], record["chunk_tokens_source"]
    lines[3] = orjson.dumps(record)
    path.write_bytes(b"\n".join(lines))
    return path


def _pyarrow_only(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refused(LineScan):
        def tables(self):  # type: ignore[override]
            raise ScanFailed("test: DuckDB off")

    monkeypatch.setattr(parquet, "LineScan", Refused)


def _scan(path: Path) -> list:
    return list(LineScan(path, requests_schema(), path.stat().st_size).tables())


def _written(jsonl: Path) -> tuple[object, dict]:
    target = write_parquet(jsonl)
    assert target is not None
    return pq.read_table(target), pq.read_metadata(target).metadata


def test_the_scan_writes_the_file_pyarrows_reader_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "_BATCH_ROWS", 7)  # several tables
    scanned = _written(_with_an_older_record(_jsonl(tmp_path / "a" / "requests.jsonl")))
    assert validate_parquet(tmp_path / "a" / "requests.jsonl") == []
    assert scanned[0].column("endpoint")[3].as_py() == "chat"
    _pyarrow_only(monkeypatch)
    parsed = _written(_with_an_older_record(_jsonl(tmp_path / "b" / "requests.jsonl")))
    assert scanned[0].equals(parsed[0])
    assert scanned[1] == parsed[1]


def test_a_blank_line_leaves_the_file_to_pyarrows_reader_after_the_scan(tmp_path, monkeypatch):
    # DuckDB skips the blank line: rows != lines, found after the scan wrote its tables.
    monkeypatch.setattr(scan, "_BATCH_ROWS", 5)
    path = _jsonl(tmp_path / "a" / "requests.jsonl")
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([*lines[:12], b"", *lines[12:]]))
    with pytest.raises(ScanFailed, match="30 rows for 31 lines"):
        _scan(path)
    scanned = _written(path)
    other = tmp_path / "b" / "requests.jsonl"
    other.parent.mkdir()
    other.write_bytes(path.read_bytes())
    _pyarrow_only(monkeypatch)
    assert scanned[0].equals(_written(other)[0])


def test_without_duckdb_the_file_is_still_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb raises ImportError
    path = _jsonl(tmp_path / "requests.jsonl")
    with pytest.raises(ScanFailed, match="does not import"):
        _scan(path)
    assert write_parquet(path) is not None and validate_parquet(path) == []


@pytest.mark.parametrize("directory", ["steady[1]", "it's"])
def test_odd_directory_names(tmp_path, directory):
    # DuckDB would take steady[1] as a glob (and read steady1/): pyarrow's reader reads it.
    path = _jsonl(tmp_path / directory / "requests.jsonl", n=3)
    _jsonl(tmp_path / "steady1" / "requests.jsonl", n=9)
    assert write_parquet(path) is not None and validate_parquet(path) == []
    assert pq.read_metadata(parquet_path(path)).num_rows == 3


def test_a_line_neither_reader_takes_leaves_no_parquet(tmp_path):
    path = _jsonl(tmp_path / "requests.jsonl", n=4)
    path.write_bytes(path.read_bytes().replace(b'"planned_at":102.0', b'"planned_at":"soon"'))
    with pytest.raises(ScanFailed, match="DuckDB"):
        _scan(path)
    assert write_parquet(path) is None
    assert not parquet_path(path).exists() and not list(tmp_path.glob(".*.tmp"))
