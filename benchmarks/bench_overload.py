"""Overload relative to capacity: does every request the server cannot serve get an answer?

Run: .venv/bin/python benchmarks/bench_overload.py [--repo DIR] [--requests 600] [--levels 2,5,10]
(--repo: the checkout whose server to start, e.g. an unpacked `git archive` of older code, to
measure before/after with the same client.) It starts `python -m reference_server` on
127.0.0.1, port 0, with its defaults (plus --device cpu unless --server-args says otherwise):

1. calibrate: a closed loop of `max_num_seqs` clients (read from /admin/batching), each sending
   the next request as soon as its previous one ends, for --calibrate-seconds; capacity = the
   completed requests per second (and output tokens per second, shown);
2. for each level L (2x, 5x, 10x): --requests requests arriving at L x capacity per second,
   evenly spaced, each on its own connection from one address (a load generator's host);
3. per level: the counts by status (or transport error kind: a connection closed or reset with
   no complete HTTP answer), the p99 TTFT of the 200s, the 5xx other than 503 (none expected),
   and the time to recover: from the last arrival until a probe request is served 200 again
   and the engine has nothing queued.

Target: 0 transport errors and 0 5xx other than the documented 503s at every level. The client
is one asyncio process speaking raw HTTP/1.1 (cheap enough for thousands of sockets on two
cores); `flood` and `offer` are also what tests/reference_server/api/test_server_overload.py
drives. Prints a table; writes benchmarks/results/overload.json (or --out).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# A request's whole life, connect to last byte; a served long stream stays well inside it.
REQUEST_TIMEOUT_SECONDS = 600.0
_READ_BYTES = 65_536


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
        self._first_body_at: float | None = None

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
        if self.buffer and self._first_body_at is None:
            self._first_body_at = now
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

    @property
    def first_body_at(self) -> float | None:
        return self._first_body_at


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
    host: str, port: int, request: bytes, source: str | None, response: _Response,
    outcome: Outcome,
) -> None:  # fmt: skip
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
        return "not OpenAI's error shape"
    return str(error.get("code")) if isinstance(error, dict) else "not OpenAI's error shape"


async def flood(host: str, port: int, request: bytes, count: int) -> list[Outcome]:
    """`count` requests at once, each on its own connection."""
    return list(await asyncio.gather(*(send_one(host, port, request) for _ in range(count))))


async def offer(host: str, port: int, request: bytes, count: int, rate: float) -> list[Outcome]:
    """`count` requests arriving at `rate` per second, evenly spaced (an open loop: an arrival
    never waits for an answer)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for index in range(count):
        delay = start + index / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(send_one(host, port, request)))
    return list(await asyncio.gather(*tasks))


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
