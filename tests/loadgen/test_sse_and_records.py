"""SSE parsing, records through the gate's derived-metric formulas, and the record validator."""

from __future__ import annotations

import pytest
from lg_support import itl_gaps, tpot

from loadgen.percentile import percentile
from loadgen.records import RecordWriter, RequestRecord, validate_load_json, validate_record
from loadgen.sse import SSEParser


def test_sse_events_split_across_reads_and_crlf_are_reassembled() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.feed(b":1}\r\n\r\n: comment\n\ndata: x\ndata: y\n") == ['{"a":1}']
    assert parser.pending()
    assert parser.feed(b"\nevent: ping\nid: 3\n\n") == ["x\ny"]
    assert not parser.pending()


def test_sse_rejects_bytes_that_are_not_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):
        SSEParser().feed(b"data: \xff\xfe\n\n")


def _ok_record(**changes: object) -> dict:
    rec = RequestRecord(
        id="0-1",
        profile="steady",
        stage="main",
        priority="interactive",
        length_class="short",
        endpoint="chat",
        stream=True,
        max_tokens=4,
        planned_at=10.0,
        sent_at=10.001,
        first_token_at=10.05,
        done_at=10.08,
        chunk_times=[10.05, 10.06, 10.08],
        chunk_tokens=[1, 1, 2],
        prompt_tokens=5,
        output_tokens=4,
        tokens_source="counted",
        status="ok",
        http_status=200,
        finish_reason="length",
    ).to_dict()
    rec.update(changes)
    return rec


def test_itl_splits_multi_token_chunks_and_tpot_uses_output_tokens() -> None:
    rec = _ok_record()
    assert itl_gaps([rec]) == pytest.approx([0.01, 0.01, 0.01])
    assert tpot(rec) == pytest.approx(0.03 / 3)
    assert rec["first_token_at"] - rec["sent_at"] == pytest.approx(0.049)  # TTFT
    assert rec["first_token_at"] - rec["planned_at"] == pytest.approx(0.05)  # from planned
    assert rec["sent_at"] - rec["planned_at"] == pytest.approx(0.001)  # schedule lag
    assert tpot(_ok_record(status="timeout", error="x")) is None  # ok requests only


def test_percentile_interpolates_and_is_not_rounded() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0011, 0.0012], 100) == 0.0012
    assert percentile([], 99) is None


def test_validator_accepts_a_good_record_and_names_each_problem() -> None:
    assert validate_record(_ok_record()) == []
    assert "missing field 'worker'" in validate_record(
        {k: v for k, v in _ok_record().items() if k != "worker"}
    )
    assert "unknown field 'ttft'" in validate_record(_ok_record(ttft=0.1))
    assert any("status" in p for p in validate_record(_ok_record(status="weird")))
    assert "http_error record without an error reason" in validate_record(
        _ok_record(status="http_error")
    )
    assert "chunk_times and chunk_tokens differ in length" in validate_record(
        _ok_record(chunk_tokens=[1])
    )
    assert "chunk_times are not increasing" in validate_record(
        _ok_record(chunk_times=[10.05, 10.04, 10.08])
    )
    assert any("wrong type" in p for p in validate_record(_ok_record(sent_at="soon")))
    assert "ok record without first_token_at" in validate_record(_ok_record(first_token_at=None))
    empty = _ok_record(first_token_at=None, chunk_times=[], chunk_tokens=[], output_tokens=0)
    assert validate_record(empty) == []


def test_writer_flushes_each_record_and_skips_duplicate_ids(tmp_path) -> None:
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        assert writer.write(_ok_record())
        assert path.read_text().count("\n") == 1  # on disk before close
        assert not writer.write(_ok_record())
        assert writer.write(_ok_record(id="0-2"))
    assert path.read_text().count("\n") == 2


def test_load_json_validator_requires_reasons_when_invalid() -> None:
    assert validate_load_json({}) != []
    problems = validate_load_json({"schema_version": 1})
    assert "missing key 'measurement_valid'" in problems


def test_to_dict_writes_every_field_in_the_documented_set() -> None:
    from dataclasses import fields

    rec = RequestRecord(
        id="0-0",
        profile="p",
        stage="main",
        priority="batch",
        length_class="long",
        endpoint="completions",
        stream=False,
        max_tokens=1,
        planned_at=1.0,
    )
    assert list(rec.to_dict()) == [f.name for f in fields(RequestRecord)]
