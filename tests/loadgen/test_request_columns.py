"""The record writer's columnar mirror (`requests.columns/`) follows docs/records.md: documented
files and dtypes, a stamp matching the JSONL, and row i equal to line i of the JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gate.rundir.columns import read_mirror
from gate.rundir.requests import read_requests
from loadgen.columns import columns_dir, validate_columns
from loadgen.records import RecordWriter, RequestRecord, validate_record


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


def test_writer_leaves_a_mirror_that_matches_the_jsonl_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for i in range(12):
            writer.write(_record(i))
    directory = columns_dir(path)
    assert directory == tmp_path / "requests.columns"
    assert validate_columns(directory, path) == []
    stamp = json.loads((directory / "stamp.json").read_text())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    cols = {p.stem: np.load(p) for p in directory.glob("*.npy")}
    offset = 0
    for i, line in enumerate(lines):
        for name in ("planned_at", "sent_at", "first_token_at", "done_at", "output_tokens"):
            value = cols[name][i]
            assert (math.isnan(value) and line[name] is None) or value == line[name]
        for name in ("status", "priority", "endpoint", "chunk_tokens_source"):
            assert stamp["names"][name][cols[name][i]] == line[name]
        k = int(cols["num_chunks"][i])
        assert cols["chunk_times"][offset : offset + k].tolist() == line["chunk_times"]
        assert cols["chunk_tokens"][offset : offset + k].tolist() == line["chunk_tokens"]
        offset += k


def test_appending_to_an_existing_file_leaves_no_mirror(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record(0))
    assert columns_dir(path).exists()
    with RecordWriter(path) as writer:  # lines from before: the mirror could not cover them
        writer.write(_record(1))
    assert not columns_dir(path).exists()


def test_validator_reports_a_stamp_that_no_longer_matches(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record(0))
    with path.open("a") as handle:
        handle.write(json.dumps(_record(1).to_dict()) + "\n")
    problems = validate_columns(columns_dir(path), path)
    assert any("stamp" in p for p in problems)


def test_multi_token_chunks_and_their_source_reach_the_gate_through_either_file(
    tmp_path: Path,
) -> None:
    # Chunk k tokens after Δt -> k gaps of Δt/k; the first chunk adds none (docs/records.md).
    multi = _record(0)
    multi.chunk_times = [100.05, 100.35, 100.45, 100.75]
    multi.chunk_tokens, multi.chunk_tokens_source = [2, 3, 1, 2], "usage"
    multi.first_token_at, multi.done_at, multi.output_tokens = 100.05, 100.8, 8
    single = _record(1)
    single.chunk_times, single.chunk_tokens = [101.05, 101.1, 101.15], [1, 1, 1]
    single.first_token_at, single.chunk_tokens_source = 101.05, "assumed"
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for record in (multi, single):
            assert validate_record(record.to_dict()) == []
            writer.write(record)
    assert read_mirror(path) is not None
    from_mirror = read_requests(path)
    columns_dir(path).rename(tmp_path / "hidden")
    from_jsonl = read_requests(path)
    expected = [0.1, 0.1, 0.1, 0.1, 0.15, 0.15, 0.05, 0.05]
    for columns in (from_mirror, from_jsonl):
        source = columns.chunk_tokens_source
        assert [source.names[c] for c in source.codes] == ["usage", "assumed"]
        assert list(columns.itl_counts) == [6, 2]
        np.testing.assert_allclose(columns.itl_seconds, expected, atol=1e-6)
