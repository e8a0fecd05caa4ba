"""The record writer's requests.parquet follows docs/records.md: the documented columns and types
(`batchgate_records.schema`, the one definition the gate reads with too), the schema version and
stamp in the file's metadata, row i equal to line i of the JSONL; and the gate takes it as
standing for the JSONL without parsing it again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from batchgate_records.schema import parquet_path
from gate.rundir.request_parquet import open_trusted
from gate.rundir.requests import read_requests
from loadgen.parquet import validate_parquet
from loadgen.records import RecordWriter, RequestRecord


def _record(i: int) -> RequestRecord:
    failed = i % 4 == 3
    first = 100.0 + i + 0.05
    times = [] if failed else [first + 0.01 * k for k in range(3 + i % 3)]
    tokens = [] if failed else [1 + (k == 1 and i % 2) for k in range(len(times))]
    return RequestRecord(
        id=f"0-{i}",
        profile="steady",
        stage="main",
        priority="batch" if i % 2 else "interactive",
        length_class="short",
        endpoint="completions" if i % 5 == 0 else "chat",
        stream=True,
        max_tokens=8,
        planned_at=100.0 + i,
        sent_at=100.0 + i + 0.001,
        first_token_at=None if failed else first,
        done_at=100.0 + i + 0.3,
        chunk_times=times,
        chunk_tokens=tokens,
        chunk_tokens_source="assumed" if failed else ("usage", "mixed", "assumed")[i % 3],
        prompt_tokens=9,
        output_tokens=None if failed else sum(tokens),
        status="timeout" if failed else "ok",
        http_status=None if failed else 200,
        error="timed out" if failed else None,
    )


def test_writer_leaves_a_parquet_that_matches_the_jsonl_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for i in range(12):
            writer.write(_record(i))
    assert parquet_path(path) == tmp_path / "requests.parquet"
    assert validate_parquet(path) == []
    rows = pq.read_table(parquet_path(path)).to_pylist()
    assert rows == [json.loads(line) for line in path.read_text().splitlines()]


def test_the_gate_reads_the_writers_parquet_without_parsing_the_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for i in range(12):
            writer.write(_record(i))
    assert open_trusted(parquet_path(path), path, []) is not None
    before = parquet_path(path).stat().st_mtime_ns
    columns = read_requests(path)
    assert columns.n == 12 and columns.notes == ()
    assert parquet_path(path).stat().st_mtime_ns == before


def test_reopening_the_writer_removes_the_parquet_until_it_closes_again(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record(0))
    writer = RecordWriter(path)
    assert not parquet_path(path).exists()  # it would stand for fewer lines than the JSONL
    writer.write(_record(1))
    writer.close()
    assert validate_parquet(path) == [] and pq.read_metadata(parquet_path(path)).num_rows == 2


def test_a_file_that_is_not_whole_lines_gets_no_parquet(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"id": "cut-off", "plan')
    with RecordWriter(path):
        pass
    assert not parquet_path(path).exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_both_writers_apply_their_options_to_the_list_columns(tmp_path: Path) -> None:
    # Options keyed by a list column's name are silently ignored by pyarrow: the written file's
    # own column metadata is what shows they took (token counts dictionary-encoded and snappy,
    # chunk times plain and uncompressed).
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for i in range(40):
            writer.write(_record(i))
    written_by_loadgen = parquet_path(path)
    gate_copy = tmp_path / "gate" / "requests.jsonl"
    gate_copy.parent.mkdir()
    gate_copy.write_bytes(path.read_bytes())
    read_requests(gate_copy)  # no Parquet there: the gate parses the JSONL and writes one
    for written in (written_by_loadgen, parquet_path(gate_copy)):
        group = pq.ParquetFile(written).metadata.row_group(0)
        columns = {group.column(i).path_in_schema: group.column(i)
                   for i in range(group.num_columns)}  # fmt: skip
        tokens, times = columns["chunk_tokens.list.element"], columns["chunk_times.list.element"]
        assert tokens.compression == "SNAPPY" and "RLE_DICTIONARY" in tokens.encodings, written
        assert times.compression == "UNCOMPRESSED" and "RLE_DICTIONARY" not in times.encodings
        assert tokens.statistics is not None and tokens.statistics.has_min_max
        assert not times.is_stats_set
