"""bench_clients.py's comparison helpers without the tools: the noise of a window's medians
(record_medians.median_noise), the band of a difference (bench_clients._band), and the openai
SDK script's hand-off stamp against a loopback fake streaming server. Nothing here asserts a
speed."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rundir_builder import request_records

from benchmarks import bench_clients
from benchmarks.client_tool_base import RunContext
from benchmarks.client_tools import OpenAISDK
from benchmarks.record_medians import median_noise, record_medians

KEYS = ("ttft_p50_ms", "itl_p50_ms")


def test_median_noise_is_zero_when_every_request_is_the_same() -> None:
    records = request_records(200, ttft_seconds=[0.02] * 200, spacing_seconds=0.05)
    noise = median_noise(records, None, KEYS)
    assert noise == {"ttft_p50_ms": 0.0, "itl_p50_ms": 0.0}


def test_median_noise_counts_blocks_not_requests() -> None:
    # The server's speed drifts from one second to the next and every request within a second
    # is alike: an i.i.d. view (one block per request) sees 200 independent draws and a small
    # error, while one-second blocks see only the ten seconds there are.
    ttfts = [0.010 + 0.002 * ((int(i * 0.05) * 7) % 10) for i in range(200)]
    records = request_records(200, ttft_seconds=ttfts, spacing_seconds=0.05)
    per_request = median_noise(records, None, KEYS, block_seconds=0.05, rounds=400)
    per_second = median_noise(records, None, KEYS, block_seconds=1.0, rounds=400)
    assert per_second["ttft_p50_ms"] > 1.5 * per_request["ttft_p50_ms"] > 0


def test_median_noise_keeps_only_the_window_and_is_seeded() -> None:
    slow = request_records(100, ttft_seconds=[0.5] * 100, spacing_seconds=0.05, start=0.0)
    even = request_records(100, ttft_seconds=[0.02] * 100, spacing_seconds=0.05, start=100.0)
    window = (100.0, 200.0)
    assert median_noise(slow + even, window, KEYS)["ttft_p50_ms"] == 0.0
    varied = request_records(100, ttft_seconds=[0.01 * (i % 7) for i in range(100)])
    assert median_noise(varied, None, KEYS, seed=3) == median_noise(varied, None, KEYS, seed=3)


def test_median_noise_needs_two_blocks() -> None:
    records = request_records(10, spacing_seconds=0.01)
    assert median_noise(records, None, KEYS) == {"ttft_p50_ms": None, "itl_p50_ms": None}
    assert median_noise([], None, KEYS) == {"ttft_p50_ms": None, "itl_p50_ms": None}


def test_band_of_a_difference_scales_with_both_sample_sizes() -> None:
    assert bench_clients._band(1.0, 100, 100) == pytest.approx(1.96 * 2**0.5)
    assert bench_clients._band(1.0, 100, 10_000) == pytest.approx(1.96 * 1.01**0.5)
    assert bench_clients._band(None, 100, 100) is None
    assert bench_clients._band(1.0, 100, 0) is None


# -- the SDK script's stamps ----------------------------------------------------------------


def _sse_body(tokens: int) -> bytes:
    def chunk(delta: dict[str, Any], usage: Any = None, choices: bool = True) -> bytes:
        obj = {
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "tiny",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}] if choices else [],
            "usage": usage,
        }  # fmt: skip
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"content": "a"}) for _ in range(tokens)]
    usage = {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": 4 + tokens}
    parts.append(chunk({}, usage=usage, choices=False))
    return b"".join(parts) + b"data: [DONE]\n\n"


@contextlib.contextmanager
def _streaming_server(tokens: int) -> Iterator[str]:
    body = _sse_body(tokens)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5.0)


def test_sdk_script_stamps_the_handoff_between_send_and_first_chunk(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    with _streaming_server(tokens=5) as url:
        ctx = RunContext(
            url=url, model="tiny", tokenizer=tmp_path, rate_rps=50.0, requests=6,
            prompt_tokens=8, output_tokens=5, out_dir=tmp_path, seed=7,
        )  # fmt: skip
        tool = OpenAISDK(name="openai-sdk", python=Path(sys.executable))
        done = subprocess.run(tool.command(ctx), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "sdk.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and not any(r["error"] for r in rows)
    for r in rows:
        assert r["sent_at"] <= r["handed_at"] <= r["chunk_times"][0] <= r["done_at"]
        assert len(r["chunk_times"]) == 5
    result = tool.read(ctx)
    assert result.errors == 0
    assert result.extra["sdk_build_p50_ms"] >= 0
    assert result.extra["ttft_from_handoff_p50_ms"] <= result.ttft_p50_ms


def test_record_medians_of_an_empty_window_has_no_values() -> None:
    medians = record_medians(request_records(5), (0.0, 1.0))
    assert medians["requests"] == 0 and medians["ttft_p50_ms"] is None
