"""Connection hygiene: who may hold a socket open, for how long, with how large a request head.

Owns `ConnectionGuard` (the open and idle connections of one server, by client address) and
`guarded_protocol`, a subclass of uvicorn's httptools protocol that enforces it:

- a connection must deliver a complete request head within `header_timeout_seconds` of being
  opened or of its previous response ending (slowloris, idle sockets); a partial head gets 408;
- a head over `max_header_bytes` (request line + headers) or `max_header_count` lines gets 431
  as soon as it is seen, so an unterminated header line costs at most one read chunk of memory;
- a new connection over `max_connections_per_client` (its address) or `max_connections` (all)
  first closes the longest-idle connection (no request in progress) of that address / of all,
  so idle sockets can never lock out a real request; when every connection is busy, the extra
  connection's requests get 503, except `/health` and `/metrics`, which keep a reserve of
  `_HEALTH_RESERVE` connections above the cap; past that reserve a new socket is closed at once.

httptools has no header limits of its own and uvicorn has no head deadline (its keep-alive
timer starts only after a first response); h11 has a byte limit but neither of the others
(docs/server.md, "Connection limits", has the measurements). The protocol also puts an
`abort()` of the connection in the ASGI scope (`ABORT_KEY`), so a stalled stream can be cut
without an error log, and a writer of body chunks that needs no await (`WRITE_NOW_KEY`, sse.py):
a token's chunk then costs one transport write instead of waking the response's task. It knows
nothing about routes beyond the exempt paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reference_server.api.server_config import ServerConfig
from reference_server.api.sse import ABORT_KEY, WRITE_NOW_KEY

__all__ = [
    "ABORT_KEY", "EXEMPT_PATHS", "ConnectionGuard", "ConnectionLimits", "guarded_protocol",
    "uvicorn_options",
]  # fmt: skip

# Orchestrators and scrapers must see the truth while clients hog the connections.
EXEMPT_PATHS = frozenset({b"/health", b"/metrics"})
_HEALTH_RESERVE = 32
# The kernel's share of what a client that stops reading costs: loopback autotuning grows a
# socket's send buffer to megabytes, so a stalled stream would be noticed only after minutes of
# generation nobody reads. Doubled by Linux; plenty for token streams and file downloads.
_SEND_BUFFER_BYTES = 65_536
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    max_connections: int
    max_connections_per_client: int
    header_timeout_seconds: float
    max_header_bytes: int
    max_header_count: int


@dataclass
class ConnectionGuard:
    """Open connections by address, and the idle ones in the order they became idle."""

    limits: ConnectionLimits
    by_client: dict[str, dict[Any, None]] = field(default_factory=dict)
    idle: dict[Any, None] = field(default_factory=dict)
    idle_by_client: dict[str, dict[Any, None]] = field(default_factory=dict)
    num_open: int = 0
    num_evicted: int = 0
    num_refused: int = 0

    def opened(self, conn: Any) -> bool:
        """Registers `conn` (idle); False when it must be closed at once (over the reserve)."""
        peer = conn.peer
        own = self.by_client.setdefault(peer, {})
        own[conn] = None
        self.num_open += 1
        self.set_idle(conn, True)
        limits = self.limits
        while len(own) > limits.max_connections_per_client and self._evict(
            self.idle_by_client.get(peer, {}), conn
        ):
            pass
        while self.num_open > limits.max_connections and self._evict(self.idle, conn):
            pass
        if self.num_open > limits.max_connections + _HEALTH_RESERVE:
            self.num_refused += 1
            return False
        return True

    def closed(self, conn: Any) -> None:
        own = self.by_client.get(conn.peer)
        if own is None or conn not in own:
            return
        del own[conn]
        if not own:
            del self.by_client[conn.peer]
        self.num_open -= 1
        self.set_idle(conn, False)

    def set_idle(self, conn: Any, idle: bool) -> None:
        peer = conn.peer
        if idle:
            self.idle[conn] = None
            self.idle_by_client.setdefault(peer, {})[conn] = None
            return
        self.idle.pop(conn, None)
        own = self.idle_by_client.get(peer)
        if own is not None:
            own.pop(conn, None)
            if not own:
                del self.idle_by_client[peer]

    def over_limit(self, conn: Any) -> bool:
        """True when `conn` is beyond a cap with nothing idle left to close for it."""
        own = self.by_client.get(conn.peer, {})
        limits = self.limits
        return len(own) > limits.max_connections_per_client or (
            self.num_open > limits.max_connections
        )

    def _evict(self, pool: dict[Any, None], keep: Any) -> bool:
        for victim in pool:
            if victim is not keep:
                self.num_evicted += 1
                self.closed(victim)  # counted out now: its connection_lost comes later
                victim.transport.close()
                return True
        return False


def guarded_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """A uvicorn protocol class bound to one server's guard (uvicorn builds one per socket)."""

    class GuardedHttpToolsProtocol(_GuardedBase):
        _guard = guard

    return GuardedHttpToolsProtocol


class _GuardedBase(HttpToolsProtocol):
    _guard: ConnectionGuard

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER_BYTES)
        self.peer = self.client[0] if self.client else ""
        self._head_bytes = 0
        self._chunk_bytes = 0
        self._header_count = 0
        self._awaiting_head = True
        self._refusal: int | None = None
        self._deadline: asyncio.TimerHandle | None = None
        if not self._guard.opened(self):
            self._guard.closed(self)
            transport.abort()
            return
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.closed(self)
        self._disarm_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._chunk_bytes = len(data)
        if self._awaiting_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # A head still incomplete past the limit (one unterminated line): stop buffering it.
        if (
            self._awaiting_head
            and self._head_bytes > self._guard.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self._refuse(431)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head = True
        # The whole chunk this head starts in counts (conservative by what precedes it there).
        self._head_bytes = self._chunk_bytes
        self._header_count = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        limits = self._guard.limits
        if self._header_count > limits.max_header_count or len(value) > limits.max_header_bytes:
            self._refusal = 431
            # httptools turns this into HttpParserError; send_400_response answers 431 instead.
            raise ValueError("request head over the limit")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._disarm_deadline()
        guard = self._guard
        guard.set_idle(self, False)
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > guard.limits.max_header_bytes:
            self._refusal = 431
            raise ValueError("request head over the limit")
        path = self.url.split(b"?", 1)[0]
        if path not in EXEMPT_PATHS and guard.over_limit(self):
            self._refusal = 503
            raise ValueError("connection over the limit")
        self.scope[ABORT_KEY] = self.transport.abort  # type: ignore[literal-required]
        super().on_headers_complete()
        # The cycle just made is this request's, even when it waits behind a pipelined one.
        writer = _chunk_writer(getattr(self, "cycle", None))
        if writer is not None:
            self.scope[WRITE_NOW_KEY] = writer  # type: ignore[literal-required]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._awaiting_head = True
            self._head_bytes = 0
            self._guard.set_idle(self, True)
            self._arm_deadline()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(self._refusal)

    def _refuse(self, status: int) -> None:
        """A short plain answer and close; nothing of the request is read further."""
        self._disarm_deadline()
        self._guard.set_idle(self, False)
        reason = _REASONS[status]
        body = reason
        head = b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n" % (status, reason)
        head += b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        self.transport.write(head + body)
        self.transport.close()

    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self._deadline = self.loop.call_later(
            self._guard.limits.header_timeout_seconds, self._head_timed_out
        )

    def _disarm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_timed_out(self) -> None:
        self._deadline = None
        if not self._awaiting_head or self.transport.is_closing():
            return
        if self._head_bytes:
            self._refuse(408)  # a partial head: tell the (slow) client why
        else:
            self.transport.close()


_CYCLE_FIELDS = ("scope", "transport", "flow", "disconnected", "response_started",
                 "response_complete", "chunked_encoding")  # fmt: skip


def _chunk_writer(cycle: Any) -> Callable[[bytes], bool] | None:
    """What uvicorn's `send` does with a non-empty body chunk of a chunked response, minus its
    await: write it, unless the transport has paused writing (then `send` would wait), the
    client has gone or the response is not open for body chunks. None when this uvicorn's
    request cycle lacks a field it reads (every chunk then takes the awaited `send`)."""
    if cycle is None or not all(hasattr(cycle, name) for name in _CYCLE_FIELDS):
        return None
    if cycle.scope.get("method") == "HEAD":  # uvicorn sends no body at all
        return None
    flow, transport = cycle.flow, cycle.transport
    if not hasattr(flow, "write_paused"):
        return None

    def write_now(body: bytes) -> bool:
        if (flow.write_paused or cycle.disconnected or not cycle.response_started
                or cycle.response_complete or cycle.chunked_encoding is not True
                or transport.is_closing()):  # fmt: skip
            return False
        if body:  # an empty chunk would end the response
            transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    return write_now


def uvicorn_options(config: ServerConfig) -> dict[str, Any]:
    """The uvicorn.Config keywords of the HTTP layer: parser, limits, timeouts, proxy trust."""
    guard = ConnectionGuard(
        ConnectionLimits(
            max_connections=config.max_connections,
            max_connections_per_client=config.client_connection_cap,
            header_timeout_seconds=config.header_timeout_seconds,
            max_header_bytes=config.max_header_bytes,
            max_header_count=config.max_header_count,
        )
    )
    proxies = config.trusted_proxies
    return {
        "http": guarded_protocol(guard),
        "ws": "none",
        "log_level": config.log_level,
        "access_log": config.access_log,
        # The guard counts connections itself and keeps room for /health and /metrics.
        "limit_concurrency": None,
        "timeout_keep_alive": config.keep_alive_timeout_seconds,
        # uvicorn would read FORWARDED_ALLOW_IPS from the environment ('*' trusts everyone).
        "proxy_headers": proxies is not None,
        "forwarded_allow_ips": proxies if proxies is not None else "",
    }
