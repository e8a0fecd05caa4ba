"""raw_stream.py, bench_server's cheapest client, against a small local server on port 0 that
streams SSE chunks with pauses between them: it reads the whole stream and its usage chunk either
way; woken per token it times the first token; with `wake_bytes` the kernel wakes it once for the
whole (smaller) stream, and it reports no first-token time instead of a wrong one. Nothing here
asserts a speed."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from raw_stream import stream_completion

_CHUNKS = 40


def _serve_one(conn: socket.socket) -> None:
    with conn:
        conn.recv(65536)  # the request: one small segment
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")  # fmt: skip
        for index in range(_CHUNKS):
            chunk = {"choices": [{"index": 0, "text": f"t{index}"}]}
            conn.sendall(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode())
            time.sleep(0.002)  # a token every 2 ms: per-token wake-ups if the client asks
        usage = {"choices": [], "usage": {"completion_tokens": _CHUNKS}}
        conn.sendall(
            f"data: {json.dumps(usage, separators=(',', ':'))}\n\ndata: [DONE]\n\n".encode()
        )


@pytest.fixture
def sse_server() -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def _run(port: int, **kwargs: int) -> dict:
    body = {"prompt": [1, 2], "max_tokens": _CHUNKS, "stream": True}
    return asyncio.run(asyncio.wait_for(stream_completion("127.0.0.1", port, body, **kwargs), 30))


def test_woken_per_token_it_times_the_first_token(sse_server: int) -> None:
    result = _run(sse_server)
    assert result["output_tokens"] == _CHUNKS
    assert result["sent"] <= result["first"] <= result["done"]
    assert result["reads"] >= 2


def test_with_wake_bytes_one_wake_up_reads_it_all_and_no_first_time_is_made_up(
    sse_server: int,
) -> None:
    # The stream (~2 KiB) is smaller than the low-water mark: only its end wakes the client.
    result = _run(sse_server, wake_bytes=32 * 1024)
    assert result["output_tokens"] == _CHUNKS
    assert result["first"] is None
    assert result["reads"] <= 2  # the whole stream, and possibly the end-of-file on its own
