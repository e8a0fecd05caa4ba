"""A raw HTTP/1.1 client for overload runs: one request per connection, and how it ended.

Owns `send_one` (connect, send, read the whole response, close), `flood` (many at once),
`Outcome` (an HTTP status, or the transport error that cut the exchange: a connection closed or
reset with no complete answer), an incremental response parser that tells a complete response
(Content-Length or chunked) from one cut short, and `raise_open_file_limit` for thousands of
sockets. One asyncio process speaking raw HTTP/1.1 is cheap enough for thousands of sockets on
two cores, where an httpx client per request would be the bottleneck. bench_overload.py and
tests/reference_server/api/test_server_overload.py drive it. It knows no endpoint's meaning
beyond OpenAI's error shape of a refusal.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Outcome", "counts", "flood", "get_text", "raise_open_file_limit", "request_bytes", "send_one",
]  # fmt: skip

# A request's whole life, connect to last byte; a served long stream stays well inside it.
REQUEST_TIMEOUT_SECONDS = 600.0
_READ_BYTES = 65_536
NOT_OPENAI = "not OpenAI's error shape"


@dataclass
class Outcome:
    """How one request ended: an HTTP status, or `transport` naming what went wrong."""

    status: int | None = None
    transport: str | None = None  # "reset", "closed before status", "closed mid-body", ...
    code: str | None = None  # the OpenAI error code of a refusal
    retry_after: str | None = None
    ttft: float | None = None  # seconds from send to the first body byte of a 200 stream
    latency: float = 0.0

    @property
    def label(self) -> str:
        return str(self.status) if self.status is not None else f"transport: {self.transport}"


class _Response:
    """An incremental HTTP/1.1 response parser: status, headers, then a Content-Length or
    chunked body, so a response cut short is told from a complete one."""

    def __init__(self) -> None:
        self.buffer = b""
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.complete = False
        self._length: int | None = None
        self._chunked = False
        self.first_body_at: float | None = None

    def feed(self, data: bytes, now: float) -> None:
        self.buffer += data
        if self.status is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            lines = head.split("\r\n")
            self.status = int(lines[0].split()[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if not self._chunked:
                self._length = int(self.headers.get("content-length", "0"))
        if self.buffer and self.first_body_at is None:
            self.first_body_at = now
        if self._chunked:
            self._read_chunks()
        else:
            assert self._length is not None
            self.body += self.buffer
            self.buffer = b""
            self.complete = len(self.body) >= self._length

    def _read_chunks(self) -> None:
        while not self.complete:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.buffer[:line_end].split(b";")[0], 16)
            if len(self.buffer) < line_end + 2 + size + 2:
                return
            start = line_end + 2
            self.body += self.buffer[start : start + size]
            self.buffer = self.buffer[start + size + 2 :]
            self.complete = size == 0


def request_bytes(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def send_one(
    host: str,
    port: int,
    request: bytes,
    *,
    source: str | None = None,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> Outcome:
    """One request on a new connection (from `source`, an address of this host), read to the
    end of its response, then closed."""
    started = time.perf_counter()
    outcome = Outcome()
    response = _Response()
    try:
        await asyncio.wait_for(_exchange(host, port, request, source, response, outcome), timeout)
    except asyncio.TimeoutError:
        outcome.transport = "timeout"
    except ConnectionRefusedError:
        outcome.transport = "connect refused"
    except ConnectionResetError:
        outcome.transport = "reset"
    except OSError as exc:
        outcome.transport = type(exc).__name__
    outcome.latency = time.perf_counter() - started
    if response.complete and outcome.transport is None:
        outcome.status = response.status
        outcome.retry_after = response.headers.get("retry-after")
        if response.status == 200 and response.first_body_at is not None:
            outcome.ttft = response.first_body_at - started
        elif response.status is not None and response.status >= 400:
            outcome.code = _error_code(bytes(response.body))
    elif outcome.transport is None:
        outcome.transport = "incomplete"
    return outcome


async def _exchange(
    host: str,
    port: int,
    request: bytes,
    source: str | None,
    response: _Response,
    outcome: Outcome,
) -> None:
    local = (source, 0) if source is not None else None
    reader, writer = await asyncio.open_connection(host, port, limit=_READ_BYTES, local_addr=local)
    try:
        writer.write(request)
        while not response.complete:
            data = await reader.read(_READ_BYTES)
            if not data:
                outcome.transport = (
                    "closed before status" if response.status is None else "closed mid-body"
                )
                return
            response.feed(data, time.perf_counter())
    finally:
        writer.close()


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return NOT_OPENAI
    return str(error.get("code")) if isinstance(error, dict) else NOT_OPENAI


async def flood(host: str, port: int, request: bytes, count: int) -> list[Outcome]:
    """`count` requests at once, each on its own connection."""
    return list(await asyncio.gather(*(send_one(host, port, request) for _ in range(count))))


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return dict(sorted(Counter(o.label for o in outcomes).items()))


def raise_open_file_limit(wanted: int) -> int:
    """The soft RLIMIT_NOFILE raised towards `wanted` (never past the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


async def get_text(host: str, port: int, path: str) -> str | None:
    """The body of `GET path` when it answers 200; None otherwise (refused, cut, closed)."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    response = _Response()
    try:
        await _exchange(host, port, request, None, response, Outcome())
    except OSError:
        return None
    if response.status != 200 or not response.complete:
        return None
    return bytes(response.body).decode("utf-8", errors="replace")
