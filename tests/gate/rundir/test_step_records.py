"""steps.jsonl as columns (docs/records.md): pyarrow's JSON reader, the exact line-by-line reader
and steps.parquet all give the same columns; the Parquet copy is trusted only while its stamp
matches the JSONL; odd files still get the exact reader's answer."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from gate.rundir.observer_records import RunDirError, read_jsonl
from gate.rundir.step_records import (
    STEP_FIELDS,
    StepColumns,
    _from_records,
    _with_missed,
    read_steps,
    steps_parquet_path,
)


def _step(seq: int, **extra) -> dict:
    record = {
        "seq": seq,
        "t": 1_764_400_000.0 + seq * 0.02,
        "duration_seconds": 0.01 + (seq % 7) * 0.001,
        "forward_seconds": 0.008,
        "policy": "continuous",
        "num_seqs": 4,
        "num_prefill_tokens": 100 + seq,
        "num_decode_tokens": 4,
        "num_kv_blocks_used": 10 + seq % 5,
        "num_kv_blocks_total": 100,
        "num_preemptions": seq % 3 == 0,
        "num_recomputed_tokens": 0,
        "num_waiting": {"interactive": seq % 4, "batch": 2},
        "num_running": {"interactive": 3, "batch": 1},
        "token_budget": None,
    }
    record["num_preemptions"] = int(record["num_preemptions"])
    record.update(extra)
    return record


def _write(path: Path, records: list[dict], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
    return path


def _exact(path: Path) -> StepColumns:
    return _with_missed(*_from_records(path, read_jsonl(path, []) or []), [])


def _same(a: StepColumns, b: StepColumns) -> None:
    for name in STEP_FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    for key in ("num_waiting", "num_running"):
        assert list(getattr(a, key)) == list(getattr(b, key))
        for name, values in getattr(b, key).items():
            assert np.array_equal(getattr(a, key)[name], values), (key, name)
    assert a.missed_records == b.missed_records


def test_fast_parse_and_parquet_copy_equal_the_exact_reader(tmp_path):
    records = [_step(s) for s in range(500) if s != 40]  # one record missed
    path = _write(tmp_path / "steps.jsonl", records)
    notes: list[str] = []
    first = read_steps(path, notes)
    assert steps_parquet_path(path).exists()
    again_notes: list[str] = []
    again = read_steps(path, again_notes)
    exact = _exact(path)
    _same(first, exact)
    _same(again, exact)
    assert first.missed_records == 1
    assert (
        notes
        == again_notes
        == ["steps.jsonl: 1 step records missed (server ring buffer overflowed)"]
    )


def test_writing_the_parquet_copy_does_not_import_pandas(tmp_path):
    # pa.array of a numpy array imports pandas (0.4 s of a JSONL-only check).
    path = _write(tmp_path / "steps.jsonl", [_step(s) for s in range(50)])
    code = (
        "import sys; from pathlib import Path; from gate.rundir.step_records import read_steps; "
        f"read_steps(Path({str(path)!r}), []); print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert steps_parquet_path(path).exists()
    _same(read_steps(path, []), _exact(path))


def test_a_stale_parquet_copy_is_not_used(tmp_path):
    path = _write(tmp_path / "steps.jsonl", [_step(s) for s in range(20)])
    read_steps(path, [])
    with path.open("ab") as handle:  # the run went on
        handle.write(orjson.dumps(_step(20)) + b"\n")
    assert len(read_steps(path, []).t) == 21


def test_classes_a_record_lacks_count_zero_and_nulls_read_as_nan(tmp_path):
    records = [_step(s) for s in range(10)]
    records[3]["num_waiting"] = {"interactive": 1}  # no batch class here
    records[5]["num_running"] = {}
    del records[6]["num_waiting"]
    records[7]["duration_seconds"] = None
    del records[8]["num_kv_blocks_used"]
    records[9]["num_waiting"]["background"] = 7  # a class only one record names
    path = _write(tmp_path / "steps.jsonl", records)
    columns = read_steps(path, [])
    _same(columns, _exact(path))
    assert columns.num_waiting["batch"][3] == 0.0
    assert list(columns.num_waiting) == ["background", "batch", "interactive"]
    assert np.isnan(columns.duration_seconds[7]) and np.isnan(columns.num_kv_blocks_used[8])
    _same(read_steps(path, []), _exact(path))  # and from the Parquet copy


def test_a_partial_last_line_is_skipped_with_a_note_and_not_cached(tmp_path):
    path = _write(tmp_path / "steps.jsonl", [_step(s) for s in range(5)], tail=b'{"seq": 5, "t"')
    notes: list[str] = []
    columns = read_steps(path, notes)
    assert len(columns.t) == 5
    assert notes == ["steps.jsonl: skipped a partial last line"]
    assert not steps_parquet_path(path).exists()


def test_a_non_number_is_still_the_exact_readers_error(tmp_path):
    records = [_step(s) for s in range(5)]
    records[2]["duration_seconds"] = "slow"
    path = _write(tmp_path / "steps.jsonl", records)
    with pytest.raises(RunDirError, match="record 3: duration_seconds: expected a number, got str"):
        read_steps(path, [])


def test_a_corrupt_parquet_copy_is_read_around_with_a_note(tmp_path):
    path = _write(tmp_path / "steps.jsonl", [_step(s) for s in range(30)])
    read_steps(path, [])
    copy = steps_parquet_path(path)
    data = bytearray(copy.read_bytes())
    data[8:200] = b"\0" * 192  # column pages gone, footer (and stamp) intact
    copy.write_bytes(bytes(data))
    notes: list[str] = []
    columns = read_steps(path, notes)
    _same(columns, _exact(path))
    assert notes and "steps.parquet: unreadable" in notes[0]


def test_a_prefix_view_reads_only_the_first_lines_and_writes_nothing(tmp_path):
    path = _write(tmp_path / "steps.jsonl", [_step(s) for s in range(30)])
    columns = read_steps(path, [], limit=12)
    assert len(columns.t) == 12
    assert not steps_parquet_path(path).exists()


def test_no_file_no_columns(tmp_path):
    assert read_steps(tmp_path / "steps.jsonl", []) is None
