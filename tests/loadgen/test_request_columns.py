"""The record writer's columnar mirror (`requests.columns/`) follows docs/records.md: documented
files and dtypes, a stamp matching the JSONL, and row i equal to line i of the JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from loadgen.columns import columns_dir, validate_columns
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
        for name in ("status", "priority", "endpoint"):
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
