"""A minimal HTTP/1.1 client over plain sockets, built for timing.

Owns connections, a keep-alive pool per target, request writing, and response reading that
yields body bytes (de-chunked) together with `time.monotonic()` taken right after each `recv`.
Plain sockets make it cooperative under gevent's monkey patching (Locust's process) and usable
with threads elsewhere, with nothing between the socket and the timestamp. It does not know
about JSON, SSE or OpenAI.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "ConnectionDropped",
    "ConnectionPool",
    "HttpConnection",
    "ProtocolError",
    "ReceiveMeter",
    "Target",
    "parse_target",
]

_MAX_HEADER_BYTES = 64 * 1024
_RECV_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The peer sent bytes that are not valid HTTP/1.1."""


class ConnectionDropped(ConnectionError):
    """The peer closed the connection before the response was complete."""


class ReceiveMeter:
    """Response bytes received from the target, and when the last of them arrived.

    One per process, shared by its connections: the load process's heartbeat reports it, so
    the gate can tell a busy target (its /health slow, answers still streaming in) from a dead
    one (docs/run.md). Counting is two additions per `recv`, nothing per request.
    """

    __slots__ = ("bytes_received", "last_at")

    def __init__(self) -> None:
        self.bytes_received = 0
        self.last_at: float | None = None  # time.monotonic() of the last byte

    def note(self, size: int, at: float) -> None:
        self.bytes_received += size
        self.last_at = at


@dataclass(frozen=True, kw_only=True)
class Target:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def parse_target(url: str) -> Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"target must be an http:// or https:// URL, got {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"target {url!r} has an invalid port") from exc
    return Target(
        scheme=parts.scheme, host=parts.hostname, port=port, base_path=parts.path.rstrip("/")
    )


class HttpConnection:
    def __init__(
        self,
        target: Target,
        *,
        connect_timeout_seconds: float,
        meter: ReceiveMeter | None = None,
    ) -> None:
        sock = socket.create_connection((target.host, target.port), timeout=connect_timeout_seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if target.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        self.sock: socket.socket = sock
        self.reused = False
        self.reusable = True
        self._buffer = b""
        self._meter = meter

    def close(self) -> None:
        self.reusable = False
        self.sock.close()

    def looks_alive(self) -> bool:
        """False when an idle pooled connection was closed by the server (keep-alive timeout)."""
        if isinstance(self.sock, ssl.SSLSocket):
            return True  # TLS cannot peek; a stale one fails fast and is retried once
        timeout = self.sock.gettimeout()
        try:
            self.sock.settimeout(0.0)
            data = self.sock.recv(1, socket.MSG_PEEK)
            del data  # EOF (b""), or bytes nobody asked for: either way unusable
            return False
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                self.sock.settimeout(timeout)

    def send_request(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        lines = [f"{method} {path} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _recv(self, deadline: float) -> tuple[bytes, float]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(left)
        data = self.sock.recv(_RECV_BYTES)
        at = time.monotonic()
        if data and self._meter is not None:
            self._meter.note(len(data), at)
        return data, at

    def read_head(self, deadline: float) -> tuple[int, dict[str, str], float]:
        """Status, lower-cased headers, and the time the first response byte arrived."""
        first_at: float | None = None
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > _MAX_HEADER_BYTES:
                raise ProtocolError("response headers exceed 64 KiB")
            data, at = self._recv(deadline)
            if not data:
                raise ConnectionDropped(
                    "connection closed before the response headers"
                    + (" were complete" if self._buffer else "")
                )
            first_at = first_at or at
            self._buffer += data
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"bad header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        if headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0":
            self.reusable = False
        return int(parts[1]), headers, first_at or time.monotonic()

    def iter_body(self, headers: dict[str, str], deadline: float) -> Iterator[tuple[bytes, float]]:
        """(payload bytes, arrival time) pieces of the body, de-chunked, as they arrive."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            yield from self._iter_chunked(deadline)
        elif "content-length" in headers:
            try:
                left = int(headers["content-length"])
            except ValueError as exc:
                raise ProtocolError("bad Content-Length") from exc
            if self._buffer:
                piece, self._buffer = self._buffer[:left], self._buffer[left:]
                left -= len(piece)
                yield piece, time.monotonic()
            while left > 0:
                data, at = self._recv(deadline)
                if not data:
                    raise ConnectionDropped(f"connection closed with {left} body bytes missing")
                piece, self._buffer = data[:left], data[left:]
                left -= len(piece)
                yield piece, at
        else:
            self.reusable = False  # body ends at close
            if self._buffer:
                yield self._buffer, time.monotonic()
                self._buffer = b""
            while True:
                data, at = self._recv(deadline)
                if not data:
                    return
                yield data, at

    def _iter_chunked(self, deadline: float) -> Iterator[tuple[bytes, float]]:
        at = time.monotonic()
        while True:
            # one chunk-size line
            while b"\r\n" not in self._buffer:
                at = self._fill(deadline, "chunk size")
            line, _, self._buffer = self._buffer.partition(b"\r\n")
            try:
                size = int(line.split(b";")[0].strip() or b"x", 16)
            except ValueError as exc:
                raise ProtocolError(f"bad chunk size line {line[:40]!r}") from exc
            if size == 0:
                while b"\r\n" not in self._buffer:  # trailers end with an empty line
                    self._fill(deadline, "chunked trailer")
                while not self._buffer.startswith(b"\r\n"):
                    _, _, self._buffer = self._buffer.partition(b"\r\n")
                    while b"\r\n" not in self._buffer:
                        self._fill(deadline, "chunked trailer")
                self._buffer = self._buffer[2:]
                return
            while len(self._buffer) < size + 2:
                # hand over partial data as soon as it arrives: timestamps stay exact
                if len(self._buffer) >= size:
                    at = self._fill(deadline, "chunk end")
                    continue
                if self._buffer:
                    size -= len(self._buffer)
                    piece, self._buffer = self._buffer, b""
                    yield piece, at
                at = self._fill(deadline, "chunk data")
            piece, self._buffer = self._buffer[:size], self._buffer[size:]
            if self._buffer[:2] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            self._buffer = self._buffer[2:]
            yield piece, at

    def _fill(self, deadline: float, what: str) -> float:
        data, at = self._recv(deadline)
        if not data:
            raise ConnectionDropped(f"connection closed mid-body (waiting for {what})")
        self._buffer += data
        return at

    def leftover(self) -> bool:
        return bool(self._buffer)


class ConnectionPool:
    """Idle keep-alive connections to one target; connections are never shared while in use."""

    def __init__(self, target: Target, *, connect_timeout_seconds: float = 10.0) -> None:
        self.target = target
        self._connect_timeout_seconds = connect_timeout_seconds
        self._idle: list[HttpConnection] = []
        # Set by the load process's Locust user before any request: every connection opened
        # from then on reports what it receives (the heartbeat's progress signal).
        self.meter: ReceiveMeter | None = None

    def acquire(self, *, fresh: bool = False) -> HttpConnection:
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.looks_alive():
                conn.reused = True
                return conn
            conn.close()
        return HttpConnection(
            self.target, connect_timeout_seconds=self._connect_timeout_seconds, meter=self.meter
        )

    def release(self, conn: HttpConnection) -> None:
        if conn.reusable and not conn.leftover():
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
