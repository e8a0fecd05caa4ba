"""gate/rundir/sample_records.py: gpu.jsonl read as columns reads the same as line by line
(values, nulls, absent fields, integers), a file the column reader refuses is read line by line
with its notes and errors, the prefix view, and no pandas import on the way (pyarrow's own
to_numpy pulls it in: 0.45 s of a check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gate.rundir.observer_records import RunDirError, read_jsonl
from gate.rundir.sample_records import SampleRecords, read_samples

ROWS = [
    {"t": 1.0, "source": "nvml", "memory_used_bytes": 5, "memory_total_bytes": 10.0, "note": None},
    {"t": 1.5, "source": "nvml", "memory_used_bytes": None, "memory_total_bytes": 10.0},
    {"t": 2.0, "source": "process_rss", "memory_used_bytes": 7, "memory_total_bytes": None},
    {"t": 2.5, "source": "none", "note": "no NVML"},
]


def _write(path: Path, rows: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a, b, equal_nan=True)


def test_columns_read_as_the_line_parser_reads_them(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    notes: list[str] = []
    columns = read_samples(path, notes)
    lines = SampleRecords(records=read_jsonl(path, notes))
    assert columns is not None and columns._table is not None  # the column reader took it
    for field in ("t", "memory_used_bytes", "memory_total_bytes", "absent", "note", "source"):
        assert _same(columns.numbers(field), lines.numbers(field)), field
    assert _same(columns.numbers("memory_used_bytes"), np.array([5.0, np.nan, 7.0, np.nan]))
    assert columns.strings("source") == lines.strings("source")
    assert columns.strings("note") == [None, None, None, "no NVML"]
    assert len(columns) == 4 and columns[3].get("note") == "no NVML"
    assert [r.get("t") for r in columns] == [r["t"] for r in ROWS]
    assert notes == []


def test_a_partial_last_line_is_skipped_with_the_line_parsers_note(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS, tail='{"t": 3.0, "sour')
    notes: list[str] = []
    samples = read_samples(path, notes)
    assert samples is not None and len(samples) == 4
    assert notes == ["gpu.jsonl: skipped a partial last line"]


def test_a_bad_line_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "gpu.jsonl"
    path.write_text('{"t": 1.0}\nnot json\n{"t": 2.0}\n')
    with pytest.raises(RunDirError, match="record 2"):
        read_samples(path, [])


def test_a_field_that_changes_type_reads_as_nan_where_it_is_not_a_number(tmp_path: Path) -> None:
    rows = [{"t": float(i), "memory_used_bytes": 1.0} for i in range(3)]
    rows.append({"t": 3.0, "memory_used_bytes": "lots"})
    samples = read_samples(_write(tmp_path / "gpu.jsonl", rows), [])
    assert samples is not None
    assert _same(samples.numbers("memory_used_bytes"), np.array([1.0, 1.0, 1.0, np.nan]))


def test_the_prefix_view_and_missing_or_empty_files(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    prefix = read_samples(path, [], limit=2)
    assert prefix is not None and _same(prefix.numbers("t"), np.array([1.0, 1.5]))
    assert read_samples(tmp_path / "none.jsonl", []) is None
    empty = read_samples(_write(tmp_path / "empty.jsonl", []), [])
    assert empty is not None and len(empty) == 0 and len(empty.numbers("t")) == 0


def test_reading_columns_does_not_import_pandas(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS * 100)
    code = (
        "import sys; from pathlib import Path; from gate.rundir.sample_records import "
        f"read_samples; s = read_samples(Path({str(path)!r}), []); s.numbers('t'); "
        "s.strings('source'); print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _copy(path: Path) -> Path:
    return path.with_name("gpu.parquet")


def _as_read(samples: SampleRecords | None) -> tuple[list[dict], list[np.ndarray]]:
    assert samples is not None
    fields = ("t", "memory_used_bytes", "memory_total_bytes", "note")
    return list(samples), [samples.numbers(f) for f in fields]


def test_a_whole_file_gets_a_parquet_copy_that_the_next_read_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    first = read_samples(path, [])
    assert _copy(path).exists()
    import pyarrow.json

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed the JSONL although its copy matches")

    monkeypatch.setattr(pyarrow.json, "read_json", no_parse)
    notes: list[str] = []
    again = read_samples(path, notes)
    assert notes == []
    records, numbers = _as_read(again)
    assert records == _as_read(first)[0]  # the column reader's dicts: every key, None if absent
    lines = read_jsonl(path, [])
    assert [{k: r.get(k) for k in records[0]} for r in lines] == records
    for got, want in zip(numbers, _as_read(first)[1], strict=True):
        assert _same(got, want)
    assert again.strings("source") == ["nvml", "nvml", "process_rss", "none"]


def test_a_copy_older_than_the_jsonl_is_not_used_and_is_rewritten(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    read_samples(path, [])
    with path.open("a") as handle:
        handle.write(json.dumps({"t": 9.0, "source": "nvml", "memory_used_bytes": 8}) + "\n")
    samples = read_samples(path, [])
    assert samples is not None and len(samples) == 5 and samples.numbers("t")[-1] == 9.0
    import pyarrow.parquet as pq

    assert pq.read_table(_copy(path)).num_rows == 5


def test_a_copy_that_does_not_decode_is_read_around_with_a_note(tmp_path: Path) -> None:
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    _copy(path).write_bytes(b"PAR1 this is not a parquet file PAR1")
    notes: list[str] = []
    samples = read_samples(path, notes)
    assert samples is not None and _same(samples.numbers("t"), np.array([1.0, 1.5, 2.0, 2.5]))
    assert len(notes) == 1 and notes[0].startswith("gpu.parquet: unreadable (")
    assert notes[0].endswith("read gpu.jsonl instead")


def test_no_copy_of_a_file_still_being_written_or_of_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "writing").mkdir()
    path = _write(tmp_path / "writing" / "gpu.jsonl", ROWS, tail='{"t": 3.0, "sour')
    read_samples(path, [])
    assert not _copy(path).exists()
    path = _write(tmp_path / "gpu.jsonl", ROWS)
    read_samples(path, [], limit=2)
    assert not _copy(path).exists()
