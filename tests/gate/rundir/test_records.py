import numpy as np
import orjson
import pytest
from rundir_builder import request_records, write_jsonl

from gate.rundir import jsonl_scan
from gate.rundir.requests import RecordsError, read_requests


@pytest.fixture(autouse=True, params=["duckdb scan", "line-exact"])
def reader(request, monkeypatch):
    """Every test with DuckDB's whole-file scan first (the default) and without it (an install
    without DuckDB, and every file the scan cannot prove): the two must agree."""
    if request.param == "line-exact":
        monkeypatch.setattr(jsonl_scan, "available", lambda: False)
    else:
        pytest.importorskip("duckdb")
    return request.param


def test_columns_hold_times_nulls_and_categories(tmp_path):
    records = request_records(
        5,
        status=["ok", "ok", "timeout", "ok", "ok"],
        priority=["interactive", "batch"] * 2 + ["batch"],
    )
    write_jsonl(tmp_path / "r.jsonl", records)
    columns = read_requests(tmp_path / "r.jsonl")
    assert columns.n == 5
    assert np.isnan(columns.first_token_at[2]) and not np.isnan(columns.first_token_at[0])
    assert columns.status.names == ("ok", "timeout")
    assert list(columns.status.equals("timeout")) == [False, False, True, False, False]
    assert list(columns.priority.mask(("batch",))) == [False, True, False, True, True]
    assert columns.endpoint.names == ("chat",)
    assert not columns.partial_last_line


def test_itl_is_per_token_and_excludes_the_first_chunk(tmp_path):
    record = request_records(1)[0]
    record.update(chunk_times=[10.0, 10.1, 10.4], chunk_tokens=[1, 1, 3])
    write_jsonl(tmp_path / "r.jsonl", [record, request_records(1, chunks=3, itl_seconds=0.05)[0]])
    columns = read_requests(tmp_path / "r.jsonl")
    assert list(columns.itl_counts) == [4, 2]
    assert columns.itl_seconds == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.05, 0.05])


def test_a_first_chunk_of_several_tokens_adds_no_gap_and_later_ones_split_theirs(tmp_path):
    # docs/records.md: gaps between consecutive content chunks; the first chunk's tokens are
    # covered by TTFT. Chunk k tokens after Δt -> k gaps of Δt/k: 0.3/3 x3, 0.1/1, 0.3/2 x2.
    record = request_records(1)[0]
    record.update(chunk_times=[10.0, 10.3, 10.4, 10.7], chunk_tokens=[2, 3, 1, 2], output_tokens=8)
    write_jsonl(tmp_path / "r.jsonl", [record])
    columns = read_requests(tmp_path / "r.jsonl")
    assert list(columns.itl_counts) == [6]  # output_tokens - the first chunk's 2
    assert columns.itl_seconds == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.15, 0.15], abs=1e-6)


def test_a_partial_last_line_is_skipped_and_reported(tmp_path):
    write_jsonl(tmp_path / "r.jsonl", request_records(3), partial_tail=True)
    columns = read_requests(tmp_path / "r.jsonl")
    assert columns.n == 3 and columns.partial_last_line


def test_a_corrupt_middle_line_names_its_line(tmp_path):
    lines = [orjson.dumps(r) for r in request_records(3)]
    lines[1] = b"{not json"
    (tmp_path / "r.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(RecordsError, match=r"r.jsonl:2: not a JSON object"):
        read_requests(tmp_path / "r.jsonl")


def test_a_missing_field_names_its_line(tmp_path):
    records = request_records(3)
    del records[2]["sent_at"]
    write_jsonl(tmp_path / "r.jsonl", records)
    with pytest.raises(RecordsError, match=r"r.jsonl:3: missing field 'sent_at'"):
        read_requests(tmp_path / "r.jsonl")


def test_empty_file_reads_as_no_requests(tmp_path):
    (tmp_path / "r.jsonl").write_bytes(b"")
    assert read_requests(tmp_path / "r.jsonl").n == 0


def test_a_line_that_is_json_but_not_an_object_names_its_line(tmp_path):
    lines = [orjson.dumps(r) for r in request_records(3)]
    lines[2] = b"[1, 2, 3]"
    (tmp_path / "r.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(RecordsError, match=r"r.jsonl:3: expected a JSON object"):
        read_requests(tmp_path / "r.jsonl")


@pytest.mark.parametrize(
    ("field", "shift", "message"),
    [
        ("first_token_at", -100.0, r"record 3: first_token_at is 100 s before sent_at"),
        ("done_at", -1e6, r"record 3: done_at is .* before sent_at \(a negative E2E\)"),
        ("output_tokens", None, r"record 3: output_tokens is -5"),
    ],
)
def test_an_impossible_record_is_not_a_measurement(tmp_path, field, shift, message):
    """A negative TTFT or token count would pass a latency gate; it is refused with its record,
    from the JSONL and again from the Parquet file that read wrote."""
    records = request_records(4)
    if shift is None:
        records[2][field] = -5
    else:
        records[2][field] = records[2]["sent_at"] + shift
    write_jsonl(tmp_path / "r.jsonl", records)
    for _ in range(2):
        with pytest.raises(RecordsError, match=rf"r.jsonl: {message}.*not a measurement"):
            read_requests(tmp_path / "r.jsonl")


def test_equal_times_and_nulls_are_not_impossible(tmp_path):
    records = request_records(3, status=["ok", "timeout", "ok"])
    records[0]["first_token_at"] = records[0]["done_at"] = records[0]["sent_at"]
    records[1]["done_at"] = None
    write_jsonl(tmp_path / "r.jsonl", records)
    assert read_requests(tmp_path / "r.jsonl").n == 3


@pytest.mark.parametrize("bound", ["file size", 3, None])
def test_gaps_fill_one_array_sized_from_the_file_and_overflow_is_joined(
    tmp_path, monkeypatch, bound
):
    # A JSONL's gaps go into one array whose length is bound by the file's size (no join of
    # per-table parts at the end); a bound too small (weighted chunks) or none joins parts,
    # with the same values.
    from gate.rundir import requests as requests_module

    records = request_records(40, chunks=6, itl_seconds=0.02)
    records[3].update(chunk_times=[10.0, 10.3, 10.4], chunk_tokens=[1, 3, 50], output_tokens=54)
    write_jsonl(tmp_path / "r.jsonl", records)
    if bound != "file size":
        monkeypatch.setattr(requests_module, "_gap_bound", lambda path: bound)
    columns = read_requests(tmp_path / "r.jsonl")
    assert columns.itl_counts.sum() == len(columns.itl_seconds) == 39 * 5 + 53
    expected = [0.02] * 15 + [0.1] * 3 + [0.002] * 50 + [0.02] * 180
    assert columns.itl_seconds == pytest.approx(expected, abs=1e-5)
    if bound == "file size":
        size = (tmp_path / "r.jsonl").stat().st_size
        assert requests_module._gap_bound(tmp_path / "r.jsonl") == size // 2
        assert columns.itl_seconds.base is not None and columns.itl_seconds.base.size == size // 2
