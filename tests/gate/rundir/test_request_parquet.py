"""requests.parquet on the reading side (docs/records.md): the first read of a JSONL-only run
writes it, it holds exactly what the JSONL says, and it is used only while its stamp matches the
JSONL; a corrupt one is read around with a note, never a traceback.

The files here are written by the gate itself or by hand; tests/loadgen/test_request_parquet.py
checks the load generator's writer against the same text."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from rundir_builder import load_json, request_records, write_jsonl

from batchgate_records.schema import requests_schema
from gate.rundir.request_parquet import open_trusted
from gate.rundir.requests import RecordsError, read_requests
from gate.rundir.run import RunDirError, load_run

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


def _records(n: int = 40) -> list[dict]:
    records = request_records(
        n,
        status=["http_error" if i % 7 == 3 else "ok" for i in range(n)],
        priority=["batch" if i % 2 else "interactive" for i in range(n)],
        stage=["main" if i < n // 2 else "spike" for i in range(n)],
        http_status=[503 if i % 7 == 3 else 200 for i in range(n)],
    )
    for i, record in enumerate(records):
        if i % 5 == 0 and record["chunk_times"]:
            record["chunk_tokens"] = [1, 1, 2, 1, 3, 1, 1, 1]
            record["output_tokens"] = 11
        record["chunk_tokens_source"] = ("usage", "assumed", "mixed")[i % 3]
        record["endpoint"] = "completions" if i % 6 == 0 else "chat"
    return records


def _decoded(columns) -> dict:
    out = {name: getattr(columns, name) for name in (*FLOATS, "itl_seconds", "itl_counts")}
    for name in CATEGORICALS:
        cat = getattr(columns, name)
        out[name] = [cat.names[c] for c in cat.codes]
    return out


def _assert_same(a, b) -> None:
    left, right = _decoded(a), _decoded(b)
    for key, value in left.items():
        if isinstance(value, list):
            assert value == right[key], key
        else:
            np.testing.assert_array_equal(value, right[key], err_msg=key)


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_first_read_of_a_jsonl_only_run_writes_a_parquet_equal_to_the_jsonl(tmp_path):
    records = _records()
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, records)
    from_jsonl = read_requests(path)
    parquet = tmp_path / "requests.parquet"
    assert _rows(parquet) == [{k: r.get(k) for k in requests_schema().names} for r in records]
    assert not list(tmp_path.glob(".*.tmp"))  # written to a temporary file and renamed
    assert open_trusted(parquet, path, []) is not None
    from_parquet = read_requests(path)
    assert from_parquet.n == from_jsonl.n == 40
    _assert_same(from_parquet, from_jsonl)


def test_the_parquet_is_read_instead_of_the_jsonl_while_its_stamp_matches(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    read_requests(path)
    written = (tmp_path / "requests.parquet").stat().st_mtime_ns
    os.utime(tmp_path / "requests.parquet", ns=(written - 10**9, written - 10**9))
    read_requests(path)  # fresh: read, not written again
    assert (tmp_path / "requests.parquet").stat().st_mtime_ns == written - 10**9


def test_a_crashed_runs_truncated_last_line_is_skipped_in_both_and_reported_again(tmp_path):
    path = tmp_path / "requests.jsonl"
    records = _records(10)
    write_jsonl(path, records, partial_tail=True)
    first = read_requests(path)
    assert first.n == 10 and first.partial_last_line
    assert [r["id"] for r in _rows(tmp_path / "requests.parquet")] == [r["id"] for r in records]
    meta = pq.read_metadata(tmp_path / "requests.parquet").metadata
    assert meta[b"batchgate.partial_last_line"] == b"true"
    assert meta[b"batchgate.jsonl_bytes"] == str(path.stat().st_size).encode()
    second = read_requests(path)  # from the Parquet: the same columns, the same note
    assert open_trusted(tmp_path / "requests.parquet", path, []) is not None
    assert second.partial_last_line
    _assert_same(first, second)


def test_a_parquet_older_than_the_jsonl_is_not_trusted_and_is_written_again(tmp_path):
    records = _records()
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, records[:-1])
    assert read_requests(path).n == 39
    with path.open("ab") as handle:  # the run went on (or was resumed) after that read
        handle.write(orjson.dumps(records[-1]) + b"\n")
    assert open_trusted(tmp_path / "requests.parquet", path, []) is None
    columns = read_requests(path)
    assert columns.n == 40 and columns.notes == ()
    assert len(_rows(tmp_path / "requests.parquet")) == 40


def test_a_jsonl_changed_at_its_end_with_the_same_size_is_noticed(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    read_requests(path)
    data = path.read_bytes()
    head, last = data[:-1].rsplit(b"\n", 1)
    changed = last.replace(b'"planned_at":1000.39', b'"planned_at":1000.38')
    assert changed != last and len(changed) == len(last)
    path.write_bytes(head + b"\n" + changed + b"\n")
    assert open_trusted(tmp_path / "requests.parquet", path, []) is None
    assert read_requests(path).planned_at[-1] == pytest.approx(1000.38)


def test_a_corrupt_parquet_falls_back_to_the_jsonl_with_a_note(tmp_path):
    profile = tmp_path / "steady"
    profile.mkdir()
    records = _records()
    write_jsonl(profile / "requests.jsonl", records)
    (profile / "load.json").write_bytes(orjson.dumps(load_json("steady", records)))
    (profile / "requests.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    run = load_run(tmp_path)
    data = run.profiles["steady"]
    assert data.requests.n == 40
    assert any("requests.parquet: unreadable" in note for note in data.notes)
    assert any("read requests.jsonl instead" in note for note in data.notes)
    assert len(_rows(profile / "requests.parquet")) == 40  # replaced by a good one


def test_a_parquet_cut_short_falls_back_to_the_jsonl(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    read_requests(path)
    parquet = tmp_path / "requests.parquet"
    data = parquet.read_bytes()
    parquet.write_bytes(data[: len(data) // 2] + data[-len(data) // 4 :])
    columns = read_requests(path)
    assert columns.n == 40
    assert any("unreadable" in note for note in columns.notes)


def test_a_corrupt_parquet_without_its_jsonl_is_a_clear_error_naming_it(tmp_path):
    profile = tmp_path / "steady"
    profile.mkdir()
    (profile / "requests.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(RunDirError, match=r"steady/requests.parquet: unreadable"):
        load_run(tmp_path)


def test_a_parquet_alone_is_read_when_the_jsonl_is_gone(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    from_jsonl = read_requests(path)
    path.unlink()
    alone = read_requests(path)
    _assert_same(from_jsonl, alone)
    assert alone.notes == ("requests.jsonl missing: read requests.parquet alone",)


def test_a_parquet_of_another_schema_version_is_not_used(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    read_requests(path)
    parquet = tmp_path / "requests.parquet"
    table = pq.read_table(parquet)
    meta = dict(pq.read_metadata(parquet).metadata)
    meta[b"batchgate.schema_version"] = b"99"
    meta.pop(b"ARROW:schema")
    pq.write_table(table.replace_schema_metadata(meta), parquet)
    columns = read_requests(path)
    assert columns.n == 40
    assert any("schema version '99'" in note for note in columns.notes)


def test_a_parquet_that_cannot_be_written_leaves_the_records_whole(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    (tmp_path / "requests.parquet").mkdir()  # in the way: cannot be replaced by a file
    columns = read_requests(path)
    assert columns.n == 40
    assert any("requests.parquet not written" in note for note in columns.notes)
    assert not list(tmp_path.glob(".*.tmp"))


def test_older_records_get_their_meant_values_in_the_parquet(tmp_path):
    records = _records(6)
    for record in records:
        del record["endpoint"], record["chunk_tokens_source"]
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, records)
    columns = read_requests(path)
    assert columns.endpoint.names == ("chat",) and columns.chunk_tokens_source.names == ("assumed",)
    rows = _rows(tmp_path / "requests.parquet")
    assert {(r["endpoint"], r["chunk_tokens_source"]) for r in rows} == {("chat", "assumed")}


def test_a_missing_key_is_an_error_even_where_null_is_allowed(tmp_path):
    # The JSON reader reads a missing key as null; the line is looked at and named.
    records = _records(5)
    del records[3]["first_token_at"]
    write_jsonl(tmp_path / "r.jsonl", records)
    with pytest.raises(RecordsError, match=r"r.jsonl:4: missing field 'first_token_at'"):
        read_requests(tmp_path / "r.jsonl")
    assert not (tmp_path / "r.parquet").exists()


@pytest.mark.parametrize("missing_at", [None, 0, 9, 161, 250, 398, 399])
def test_a_missing_key_is_found_among_many_lines_of_many_lengths(tmp_path, missing_at):
    # Rows with a null are looked up by counting newlines; lines of very different lengths
    # must not make the lookup land on the wrong line.
    records = _records(400)
    for i, record in enumerate(records):
        record["error"] = "x" * 3000 if i // 40 % 3 == 2 else None
        if i % 11 == 2:
            record["sent_at"] = None
    if missing_at is not None:
        del records[missing_at]["done_at"]
    write_jsonl(tmp_path / "r.jsonl", records)
    if missing_at is None:
        columns = read_requests(tmp_path / "r.jsonl")
        assert np.isnan(columns.sent_at[2::11]).all() and columns.n == 400
        return
    with pytest.raises(RecordsError, match=rf"r.jsonl:{missing_at + 1}: missing field 'done_at'"):
        read_requests(tmp_path / "r.jsonl")


def test_blank_lines_and_a_final_line_without_newline_read_like_the_jsonl_says(tmp_path):
    records = _records(4)
    lines = [orjson.dumps(r) for r in records]
    (tmp_path / "r.jsonl").write_bytes(
        b"\n".join([lines[0], b"", lines[1], b"  ", lines[2]]) + b"\n" + lines[3]
    )
    columns = read_requests(tmp_path / "r.jsonl")
    assert columns.n == 4 and not columns.partial_last_line
    assert [r["id"] for r in _rows(tmp_path / "r.parquet")] == [r["id"] for r in records]


def test_a_prefix_read_neither_reads_nor_writes_the_parquet(tmp_path):
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _records())
    assert read_requests(path, max_records=7).n == 7
    assert not (tmp_path / "requests.parquet").exists()
    read_requests(path)
    assert read_requests(path, max_records=7).n == 7


@pytest.mark.parametrize("block_bytes", [4096, 300])  # a few lines a block; less than a line
def test_many_blocks_read_like_one(tmp_path, monkeypatch, block_bytes):
    import gate.rundir.jsonl_records as jsonl_records

    records = _records(300)
    path = tmp_path / "requests.jsonl"
    write_jsonl(path, records, partial_tail=True)
    whole = read_requests(path)
    (tmp_path / "requests.parquet").unlink()
    monkeypatch.setattr(jsonl_records, "_BLOCK_BYTES", block_bytes)
    blocks = read_requests(path)
    _assert_same(whole, blocks)
    assert blocks.partial_last_line
    assert [r["id"] for r in _rows(tmp_path / "requests.parquet")] == [r["id"] for r in records]


def _one_token_records(n: int = 30) -> list[dict]:
    records = request_records(n, status=["http_error" if i % 9 == 4 else "ok" for i in range(n)])
    for record in records:
        if record["status"] != "ok":
            record["chunk_times"], record["chunk_tokens"] = [], []
    return records


def test_one_token_chunks_are_known_from_statistics_without_reading_the_counts(
    tmp_path, monkeypatch
):
    from gate.rundir.request_parquet import TrustedParquet

    path = tmp_path / "requests.jsonl"
    write_jsonl(path, _one_token_records())
    from_jsonl = read_requests(path)
    asked = []
    tables = TrustedParquet.tables

    def spy(self, *, chunk_tokens=True):
        asked.append(chunk_tokens)
        return tables(self, chunk_tokens=chunk_tokens)

    monkeypatch.setattr(TrustedParquet, "tables", spy)
    _assert_same(read_requests(path), from_jsonl)
    assert asked == [False]


def test_without_statistics_or_with_larger_chunks_the_counts_are_read(tmp_path, monkeypatch):
    from gate.rundir.request_parquet import TrustedParquet

    for name, records, stats in (
        ("no-stats", _one_token_records(), False),
        ("multi", _records(), True),
    ):
        path = tmp_path / name / "requests.jsonl"
        path.parent.mkdir()
        write_jsonl(path, records)
        from_jsonl = read_requests(path)
        parquet = tmp_path / name / "requests.parquet"
        if not stats:  # the same file written again without column statistics
            table, meta = pq.read_table(parquet), pq.read_metadata(parquet).metadata
            pq.write_table(table.replace_schema_metadata(meta), parquet, write_statistics=False)
        asked = []
        tables = TrustedParquet.tables

        def spy(self, *, chunk_tokens=True, asked=asked, tables=tables):
            asked.append(chunk_tokens)
            return tables(self, chunk_tokens=chunk_tokens)

        monkeypatch.setattr(TrustedParquet, "tables", spy)
        _assert_same(read_requests(path), from_jsonl)
        monkeypatch.undo()
        assert asked == [True], name


@pytest.mark.parametrize("seed", range(4))
def test_lines_of_rows_found_by_counting_newlines_are_the_lines_walked_to(seed):
    from gate.rundir.jsonl_records import _lines_at, _lines_past_blanks

    rng = np.random.default_rng(seed)
    lengths = rng.choice([20, 20, 20, 3000], size=3000)  # runs of short lines among long ones
    lines = [b"x" * int(k) + b"%d" % i for i, k in enumerate(lengths)]
    data = b"\n".join(lines) + b"\n"
    rows = sorted(rng.choice(3000, 40, replace=False).tolist())
    expected = [lines[r] for r in rows]
    assert _lines_at(data, len(data), rows, 3000) == expected
    assert _lines_past_blanks(data, len(data), rows) == expected
