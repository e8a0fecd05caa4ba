"""One streamed completion read by an asyncio Protocol: the cheapest client a benchmark can be.

bench_server.py measures how many tokens/s the server delivers over HTTP against what its
engine makes offline. On a 2-core machine the client shares the cores with the server's two
processes, so every microsecond the client spends per token is taken from the server: an
httpx stream costs ~80 us of CPU a token here (an await and a parse per SSE event), as much as
the server's whole HTTP layer. A real client sits on another machine. This one does no work
per event beyond keeping the tail of the bytes: the kernel hands it whatever has arrived, it
notes when the first token text came, and it reads the final usage chunk once, at the end.

With `wake_bytes` it goes further: the kernel wakes it once that many bytes wait (the socket's
SO_RCVLOWAT) or the stream ends (or on an error), so the server's writes no longer wake it per
token.
Over one 64-stream x 256-token run of bench_server here, 32 KiB took the client from 0.45 to
0.16 CPU-s and from 5,657 to 84 context switches (medians of 8 alternating runs). The first
token's time is then not measured (None): bench_server's throughput runs do not use it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

__all__ = ["has_content", "stream_completion"]

_TAIL_BYTES = 8192


class _Reader(asyncio.Protocol):
    def __init__(self, request: bytes, done: asyncio.Future[None], wake_bytes: int) -> None:
        self._request = request
        self._done = done
        self._wake_bytes = wake_bytes
        self.head = b""
        self.tail = b""
        self.first: float | None = None
        self.reads = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        if self._wake_bytes:
            try:
                sock = transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, self._wake_bytes)
            except (OSError, AttributeError) as exc:  # e.g. no SO_RCVLOWAT on this system
                # Raised here, the loop would only log it and the stream would wait forever.
                self._done.set_exception(exc)
                transport.close()
                return
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if len(self.head) < 64:
            self.head += data[:64]
        # Woken late on purpose, this client cannot tell when the first token came.
        if self.first is None and not self._wake_bytes and has_content(data):
            self.first = time.perf_counter()
        self.tail = (self.tail + data)[-_TAIL_BYTES:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            if exc is None:
                self._done.set_result(None)
            else:
                self._done.set_exception(exc)


def has_content(data: bytes) -> bool:
    """Whether raw SSE bytes hold a chunk with non-empty text (role/empty chunks do not count)."""
    start = 0
    while (index := data.find(b'"text":"', start)) >= 0:
        if data[index + 8 : index + 9] not in (b'"', b""):
            return True
        start = index + 8
    return False


async def stream_completion(
    host: str, port: int, body: dict[str, Any], *, wake_bytes: int = 0
) -> dict[str, Any]:
    """POST /v1/completions with `body` (stream with include_usage), `Connection: close`, and
    read to the end, woken per `wake_bytes` bytes if > 0 (module docstring). Returns the send,
    first-token (None with `wake_bytes`) and end times, the usage's completion_tokens (0 without
    a usage chunk) and how many reads the stream took. A status other than 200 raises."""
    if not 0 <= wake_bytes < 2**31:
        raise ValueError(f"wake_bytes must be in [0, 2**31): {wake_bytes}")
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + payload
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    sent = time.perf_counter()
    transport, reader = await loop.create_connection(
        lambda: _Reader(request, done, wake_bytes), host, port
    )
    try:
        await done
    finally:
        transport.close()
    finished = time.perf_counter()
    status = reader.head.split(b"\r\n", 1)[0]
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"server answered {status!r}: {reader.tail[-500:]!r}")
    usage = None
    for line in reversed(reader.tail.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage":{' in line:
            usage = json.loads(line[6:])["usage"]
            break
    tokens = usage["completion_tokens"] if usage else 0
    return {"sent": sent, "first": reader.first, "done": finished, "output_tokens": tokens,
            "reads": reader.reads}  # fmt: skip
