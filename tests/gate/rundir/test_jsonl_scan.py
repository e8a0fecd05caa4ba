"""DuckDB's whole-file scan of requests.jsonl (batchgate_records.scan, proven by
gate.rundir.jsonl_scan): the same tables as the line-exact reader where it can prove them,
`Unproven` (and the line-exact reader's verdict through read_requests) where it cannot."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from rundir_builder import request_records, write_jsonl

from batchgate_records import scan as shared_scan
from gate.rundir.jsonl_records import JsonlRecords
from gate.rundir.jsonl_scan import JsonlScan, Unproven
from gate.rundir.requests import RecordsError, read_requests

pytest.importorskip("duckdb")


def _varied_records() -> list[dict]:
    records = request_records(
        6, status=["ok", "timeout", "ok", "http_error", "ok", "ok"], http_status=[200, 0, 200, 503,
        200, 200],
    )  # fmt: skip
    records[1].update(first_token_at=None, done_at=None, chunk_times=[], chunk_tokens=[],
                      output_tokens=None, finish_reason=None, error="read timeout")  # fmt: skip
    records[2].update(chunk_times=[10.0, 10.1, 10.4], chunk_tokens=[1, 1, 3])
    records[3].update(http_status=None, error="HTTP 503 [overloaded]")
    # An older record: no endpoint, no chunk_tokens_source (their defaults apply).
    del records[4]["endpoint"]
    records[4].pop("chunk_tokens_source", None)
    records[5]["a_future_field"] = {"nested": [1, 2]}
    return records


def _concat(tables) -> pa.Table:
    return pa.concat_tables(list(tables)).combine_chunks()


@pytest.mark.parametrize("newline_at_end", [True, False])
def test_the_scan_gives_the_line_exact_readers_tables(tmp_path, newline_at_end):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _varied_records())
    if not newline_at_end:
        path.write_bytes(path.read_bytes().rstrip(b"\n"))
    scan, exact = JsonlScan(path), JsonlRecords(path)
    scanned, parsed = _concat(scan.tables()), _concat(exact.tables())
    assert scanned.num_rows == 6
    assert scanned.equals(parsed), (scanned.to_pylist(), parsed.to_pylist())
    assert (scan.bytes_read, scan.tail, scan.partial_last_line) == (
        exact.bytes_read, exact.tail, exact.partial_last_line)  # fmt: skip


def test_many_batches_keep_the_lines_order(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_scan, "_BATCH_ROWS", 1000)
    path = tmp_path / "requests.jsonl"
    records = request_records(5000, status=["ok", "timeout"] * 2500)
    for record in records[1::2]:
        record.update(first_token_at=None, chunk_times=[], chunk_tokens=[])
    write_jsonl(path, records)
    scanned = _concat(JsonlScan(path).tables())
    assert scanned.column("id").to_pylist() == [r["id"] for r in records]
    assert scanned.equals(_concat(JsonlRecords(path).tables()))


def _lines(n: int = 4) -> list[bytes]:
    return [orjson.dumps(r) for r in request_records(n)]


def _unproven_cases() -> dict[str, bytes]:
    cases = {}
    lines = _lines()
    cases["not JSON"] = b"\n".join([*lines[:2], b"{not json", lines[3]]) + b"\n"
    cases["blank line"] = b"\n".join([*lines[:2], b"", *lines[2:]]) + b"\n"
    cases["partial last line"] = b"\n".join(lines) + b'\n{"id": "cut-off", "planned_'
    for name, change in {
        "missing nullable key": lambda r: r.pop("sent_at"),
        "missing required key": lambda r: r.pop("planned_at"),
        "null where a value is needed": lambda r: r.update(status=None),
        "chunk lists differ": lambda r: r.update(chunk_tokens=[1]),
        "unconvertible value": lambda r: r.update(planned_at="soon"),
        "not an object": None,
    }.items():
        records = request_records(4)
        if change is None:
            body = [orjson.dumps(r) for r in records[:2]] + [b"[1, 2]", orjson.dumps(records[3])]
        else:
            change(records[2])
            body = [orjson.dumps(r) for r in records]
        cases[name] = b"\n".join(body) + b"\n"
    return cases


@pytest.mark.parametrize("case", sorted(_unproven_cases()))
def test_what_the_scan_cannot_prove_is_left_to_the_line_exact_reader(tmp_path, case):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(_unproven_cases()[case])
    with pytest.raises(Unproven):
        _concat(JsonlScan(path).tables())


def test_a_quoted_number_reads_as_the_number(tmp_path):
    # docs/records.md: DuckDB converts a value of another JSON type where it can.
    records = request_records(2)
    records[1]["prompt_tokens"] = str(records[1]["prompt_tokens"])
    write_jsonl(tmp_path / "r.jsonl", records)
    table = _concat(JsonlScan(tmp_path / "r.jsonl").tables())
    assert table.column("prompt_tokens").to_pylist() == [records[0]["prompt_tokens"]] * 2


def test_a_file_that_changes_while_read_is_unproven(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "r.jsonl", request_records(3))
    monkeypatch.setattr(shared_scan, "_size", lambda path: -1)
    with pytest.raises(Unproven, match="changed"):
        _concat(JsonlScan(tmp_path / "r.jsonl").tables())


def test_the_parquet_written_from_a_scan_stands_for_the_jsonl(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _varied_records())
    first = read_requests(path)
    assert (tmp_path / "requests.parquet").exists()
    second = read_requests(path)  # from the Parquet file
    for name in ("planned_at", "first_token_at", "itl_seconds", "itl_counts"):
        assert getattr(first, name).tolist() == pytest.approx(
            getattr(second, name).tolist(), nan_ok=True)  # fmt: skip
    assert first.endpoint.names == second.endpoint.names


def test_a_directory_name_with_a_quote_is_read(tmp_path):
    directory = tmp_path / "it's a run"
    directory.mkdir()
    write_jsonl(directory / "requests.jsonl", request_records(3))
    assert _concat(JsonlScan(directory / "requests.jsonl").tables()).num_rows == 3


def test_a_path_duckdb_would_glob_is_left_to_the_line_exact_reader(tmp_path):
    # DuckDB reads `steady[1]/requests.jsonl` as a pattern that matches `steady1/`.
    ours, sibling = tmp_path / "steady[1]", tmp_path / "steady1"
    ours.mkdir()
    sibling.mkdir()
    write_jsonl(ours / "requests.jsonl", request_records(3, start=1000.0))
    write_jsonl(sibling / "requests.jsonl", request_records(3, start=5000.0))
    with pytest.raises(Unproven, match="glob"):
        _concat(JsonlScan(ours / "requests.jsonl").tables())
    assert read_requests(ours / "requests.jsonl").planned_at.min() == 1000.0


def test_an_error_past_duckdbs_first_vector_still_names_its_line(tmp_path):
    # Past its first 2048 rows DuckDB reports through the Arrow stream (as OSError).
    lines = [orjson.dumps(r) for r in request_records(2200)]
    lines[2100] = lines[2100][:100]
    (tmp_path / "r.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(RecordsError, match=r"r.jsonl:2101: not a JSON object"):
        read_requests(tmp_path / "r.jsonl")


@pytest.mark.parametrize(
    "field, text",
    [("status", b"true"), ("status", b"200"), ("stage", b'{"a": 1}'), ("planned_at", b"NaN"),
     ("sent_at", b"1e400"), ("done_at", b'"nan"')],
)  # fmt: skip
def test_values_duckdb_would_convert_but_no_writer_makes_are_left_to_the_exact_reader(
    tmp_path, field, text
):
    records = request_records(3)
    records[1][field] = "PLACEHOLDER"
    data = b"".join(orjson.dumps(r) + b"\n" for r in records).replace(b'"PLACEHOLDER"', text)
    (tmp_path / "r.jsonl").write_bytes(data)
    with pytest.raises(Unproven):
        _concat(JsonlScan(tmp_path / "r.jsonl").tables())
