"""raw_stream.py, bench_server's cheapest client, against a small local server on port 0 that
streams SSE chunks with pauses between them: it reads the whole stream and its usage chunk either
way; woken per token it times the first token; with `wake_bytes` the kernel wakes it once per
that many bytes, and it reports no first-token time instead of a wrong one. A refusal is an
error in both modes, and a `wake_bytes` the socket cannot take is an error, not a hang. Nothing
here asserts a speed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.raw_stream import stream_completion


def _frame(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _serve_one(conn: socket.socket) -> None:
    # A client that gives up (a refusal read, a socket option it could not set) may close
    # before the request or mid-stream: that ends this connection, not the test run.
    with conn, contextlib.suppress(OSError):
        request = conn.recv(65536)  # one small segment
        if not request:
            return
        body = json.loads(request.split(b"\r\n\r\n", 1)[1])
        if body.get("refuse"):
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n"
                         b"connection: close\r\n\r\n{}")  # fmt: skip
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")  # fmt: skip
        tokens = body["max_tokens"]
        for index in range(tokens):
            conn.sendall(_frame({"choices": [{"index": 0, "text": f"t{index}" + "x" * 200}]}))
            time.sleep(0.001)  # a token a millisecond: per-token wake-ups if the client asks
        conn.sendall(_frame({"choices": [], "usage": {"completion_tokens": tokens}}))
        conn.sendall(b"data: [DONE]\n\n")


@pytest.fixture
def sse_server() -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)  # closing a socket does not wake a thread blocked in accept()
    stopping = threading.Event()
    served: list[threading.Thread] = []

    def loop() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            served.append(threading.Thread(target=_serve_one, args=(conn,), daemon=True))
            served[-1].start()

    accepting = threading.Thread(target=loop, daemon=True)
    accepting.start()
    yield listener.getsockname()[1]
    stopping.set()
    # Within this test: a connection thread's failure is then this test's, not the next one's.
    for thread in [accepting, *served]:
        thread.join(timeout=30)
    listener.close()


def _run(port: int, tokens: int = 40, refuse: bool = False, **kwargs: int) -> dict:
    body = {"prompt": [1, 2], "max_tokens": tokens, "stream": True, "refuse": refuse}
    return asyncio.run(asyncio.wait_for(stream_completion("127.0.0.1", port, body, **kwargs), 30))


def test_woken_per_token_it_times_the_first_token(sse_server: int) -> None:
    result = _run(sse_server)
    assert result["output_tokens"] == 40
    assert result["sent"] <= result["first"] <= result["done"]


def test_with_wake_bytes_a_short_stream_is_one_wake_up_and_no_first_time_is_made_up(
    sse_server: int,
) -> None:
    # ~9 KiB, under the low-water mark: only its end wakes the client.
    result = _run(sse_server, wake_bytes=32 * 1024)
    assert result["output_tokens"] == 40
    assert result["first"] is None
    assert result["reads"] <= 2  # the whole stream, and possibly the end-of-file on its own


def test_with_wake_bytes_a_long_stream_is_read_whole(sse_server: int) -> None:
    result = _run(sse_server, tokens=400, wake_bytes=16 * 1024)  # ~90 KiB
    assert result["output_tokens"] == 400
    assert result["first"] is None


@pytest.mark.parametrize("wake_bytes", [0, 32 * 1024])
def test_a_refusal_is_an_error(sse_server: int, wake_bytes: int) -> None:
    with pytest.raises(RuntimeError, match="503"):
        _run(sse_server, refuse=True, wake_bytes=wake_bytes)


@pytest.mark.parametrize("wake_bytes", [-1, 2**31])
def test_a_wake_bytes_the_socket_cannot_take_is_an_error(sse_server: int, wake_bytes: int) -> None:
    with pytest.raises(ValueError, match="wake_bytes"):
        _run(sse_server, wake_bytes=wake_bytes)


def test_a_socket_without_the_option_is_an_error_not_a_hang(
    sse_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio.trsock

    def refuse(*args: object) -> None:
        raise OSError(92, "Protocol not available")

    monkeypatch.setattr(asyncio.trsock.TransportSocket, "setsockopt", refuse)
    with pytest.raises(OSError, match="Protocol not available"):
        _run(sse_server, wake_bytes=32 * 1024)  # wait_for's 30 s would fail a hang
