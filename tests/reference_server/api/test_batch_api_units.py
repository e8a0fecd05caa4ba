"""Batch API pieces that need no server: the streaming multipart reader, completion windows,
input-line envelopes, the in-flight bound, the store's exactly-once results and its cleanup,
the flags and the metrics."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from server_testlib import metric

from reference_server.api.batch.job_stats import JobStats
from reference_server.api.batch.limits import BatchLimits, parse_completion_window
from reference_server.api.batch.lines import LineError, endings, read_envelope, refusals
from reference_server.api.batch.multipart import MultipartError, boundary_of, read_multipart
from reference_server.api.batch.store import BatchStore
from reference_server.api.cli import parse_configs
from reference_server.api.errors import APIError
from reference_server.api.server_config import ServerConfig, ServerConfigError

LIMITS = BatchLimits.from_config(ServerConfig())


async def _chunked(data: bytes, size: int):
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _form(boundary: str, file_bytes: bytes) -> bytes:
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="in.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
        ).encode()
        + file_bytes
        + f"\r\n--{boundary}--\r\n".encode()
    )


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 100_000])
def test_multipart_reader_streams_the_file_part_whatever_the_chunking(chunk_size):
    # The file holds the boundary's prefix and CRLFs: only a full delimiter ends a part.
    payload = b'{"a": 1}\r\n--not-the-boundary\r\n' * 20 + b"\r\n--bound"
    body = _form("bound123", payload)
    received = bytearray()
    result = asyncio.run(
        read_multipart(_chunked(body, chunk_size), "bound123", file_sink=received.extend)
    )
    assert bytes(received) == payload
    assert result.fields == {"purpose": "batch"}
    assert (result.file_field, result.filename) == ("file", "in.jsonl")


def test_multipart_reader_refuses_broken_bodies():
    with pytest.raises(MultipartError, match="closing boundary"):
        asyncio.run(read_multipart(_chunked(_form("b", b"x")[:-8], 5), "b", file_sink=len))
    with pytest.raises(MultipartError):
        boundary_of("application/json")
    assert boundary_of('multipart/form-data; boundary="a b"') == "a b"


@pytest.mark.parametrize(
    ("window", "seconds"), [("24h", 86400.0), ("1h", 3600.0), ("30m", 1800.0), ("2s", 2.0)]
)
def test_completion_windows_in_hours_minutes_or_seconds(window, seconds):
    assert parse_completion_window(window, LIMITS) == seconds


@pytest.mark.parametrize("window", ["25h", "0h", "1d", "24", 24, "1.5h", ""])
def test_completion_windows_past_the_limit_or_malformed_are_refused(window):
    with pytest.raises(APIError) as caught:
        parse_completion_window(window, LIMITS)
    assert caught.value.param == "completion_window"
    if window == "25h":
        assert "--batch-max-completion-window-seconds" in caught.value.message


def test_envelope_refusals_name_the_problem():
    good = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}
    assert read_envelope(orjson.dumps(good), 1, endpoint="/v1/completions",
                         max_line_bytes=100).custom_id == "a"  # fmt: skip
    cases = {
        b"[1]": "invalid_request",
        orjson.dumps({**good, "custom_id": ""}): "missing_custom_id",
        orjson.dumps({**good, "method": "GET"}): "invalid_method",
        orjson.dumps({**good, "url": "/v1/chat/completions"}): "mismatched_endpoint",
        orjson.dumps({**good, "body": "x"}): "invalid_body",
        orjson.dumps({**good, "body": {"p": "x" * 200}}): "line_too_large",
    }
    for raw, code in cases.items():
        with pytest.raises(LineError) as caught:
            read_envelope(raw, 3, endpoint="/v1/completions", max_line_bytes=100)
        assert caught.value.code == code


def test_refusals_and_endings_carry_line_numbers(tmp_path: Path):
    path = tmp_path / "in.jsonl"
    rows = [{"custom_id": "a", "url": "/v1/completions", "body": {}}, "bad",
            {"custom_id": "a", "url": "/v1/completions", "body": {}}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) if isinstance(r, dict) else r for r in rows) + "\n\n")
    total, refused = refusals(path, endpoint="/v1/completions", max_line_bytes=1000)
    assert total == 3
    assert [(line, json.loads(rec)["error"]["code"]) for line, rec in refused] == [
        (2, "invalid_json"), (3, "duplicate_custom_id")
    ]  # fmt: skip
    total, ended = endings(path, {2, 3}, "batch_expired", "too late")
    assert [(line, json.loads(rec)["custom_id"]) for line, rec in ended] == [(1, "a")]


def test_default_inflight_bound_fills_the_engine_and_stays_within_the_batch_queue():
    batching = {"max_num_seqs": 64, "batch": {"max_waiting": 1024}}
    assert LIMITS.inflight_bound(batching) == 128
    assert LIMITS.inflight_bound({"max_num_seqs": 64, "batch": {"max_waiting": 50}}) == 50
    # Job lines in the interactive class (batch_api_priority) are bounded by its queue.
    moved = {"max_num_seqs": 64, "batch_api_priority": "interactive",
             "interactive": {"max_waiting": 16}, "batch": {"max_waiting": 1024}}  # fmt: skip
    assert LIMITS.inflight_bound(moved) == 16
    fixed = BatchLimits.from_config(ServerConfig(batch_max_inflight=3))
    assert fixed.inflight_bound(batching) == 3


def _store(tmp_path: Path) -> BatchStore:
    store = BatchStore(tmp_path)
    store.open()
    upload = store.upload_path()
    upload.write_text("{}\n")
    file_row = store.add_file(upload, filename="in.jsonl", purpose="batch", num_bytes=3,
                              num_lines=1, retention_seconds=60)  # fmt: skip
    store.add_batch({
        "id": "batch_1", "endpoint": "/v1/completions", "input_file_id": file_row["id"],
        "completion_window": "1h", "window_seconds": 3600, "status": "in_progress",
        "created_at": 1.0, "expires_at": 3601.0, "total": 3,
    })  # fmt: skip
    return store


def test_a_line_recorded_twice_counts_and_appears_once(tmp_path: Path):
    store = _store(tmp_path)
    first = [("batch_1", 1, True, b'{"custom_id":"a"}', 5, 4),
             ("batch_1", 2, False, b'{"custom_id":"b"}', 0, 0)]  # fmt: skip
    assert store.record_results(first) == 2
    # The same lines again (a re-run after a restart) plus a new one.
    again = [("batch_1", 1, True, b'{"custom_id":"a","again":1}', 5, 4),
             ("batch_1", 3, True, b'{"custom_id":"c"}', 5, 4)]  # fmt: skip
    assert store.record_results(again) == 1
    row = store.get_batch("batch_1")
    assert (row["completed"], row["failed"], row["output_tokens"]) == (2, 1, 8)
    output_id, error_id = store.finalize(
        "batch_1", retention_seconds=60, status="completed", completed_at=2.0
    )
    output = store.path_of(output_id).read_bytes().splitlines()
    assert output == [b'{"custom_id":"a"}', b'{"custom_id":"c"}']
    assert store.path_of(error_id).read_bytes() == b'{"custom_id":"b"}\n'
    assert store.get_batch("batch_1")["status"] == "completed"
    store.close()


def test_files_without_a_row_are_removed_when_the_store_opens(tmp_path: Path):
    store = _store(tmp_path)
    stray = store.upload_path()
    stray.write_text("half an upload")
    orphan = store.path_of("file-orphan")
    orphan.write_text("a finalization cut short")
    store.close()
    reopened = BatchStore(tmp_path)
    reopened.open()
    assert not stray.exists() and not orphan.exists()
    assert len(list(reopened.files_dir.iterdir())) == 1
    reopened.close()


def test_batch_flags_set_the_config_and_bad_values_name_the_flag(capsys):
    _, server = parse_configs(["--data-dir", "/tmp/x", "--batch-max-inflight", "7",
                               "--batch-max-line-bytes", "10"])  # fmt: skip
    assert (server.data_dir, server.batch_max_inflight, server.batch_max_line_bytes) == (
        "/tmp/x", 7, 10
    )  # fmt: skip
    with pytest.raises(SystemExit):
        parse_configs(["--batch-max-file-lines", "0"])
    assert "--batch-max-file-lines" in capsys.readouterr().err
    with pytest.raises(ServerConfigError, match="batch_retention_seconds"):
        ServerConfig(batch_retention_seconds=0)


def test_job_metrics_render_with_units_in_their_names():
    times = iter([100.0, 100.5, 101.0])
    stats = JobStats(clock=lambda: next(times))
    stats.count_line(ok=True, output_tokens=40)
    stats.count_line(ok=False, output_tokens=0)
    stats.count_failed(3)
    stats.set_job_counts({"in_progress": 2})
    stats.line_gauges = lambda: (5, 90, 8)
    registry = CollectorRegistry()
    registry.register(stats.collector())
    text = generate_latest(registry).decode()
    assert metric(text, "batchgate_batch_jobs", status="in_progress") == 2
    assert metric(text, "batchgate_batch_jobs", status="cancelled") == 0
    assert metric(text, "batchgate_batch_job_lines_total", outcome="completed") == 1
    assert metric(text, "batchgate_batch_job_lines_total", outcome="failed") == 4
    assert metric(text, "batchgate_batch_job_lines_inflight") == 5
    assert metric(text, "batchgate_batch_job_lines_pending") == 90
    assert metric(text, "batchgate_batch_job_max_inflight") == 8
    assert metric(text, "batchgate_batch_job_output_tokens_total") == 40
    assert metric(text, "batchgate_batch_job_output_tokens_per_second") == 4.0
