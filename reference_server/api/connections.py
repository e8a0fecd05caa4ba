"""The HTTP/1.1 protocol of the server: uvicorn's httptools protocol with connection hygiene.

Owns `guarded_protocol`, a subclass of uvicorn's httptools protocol that enforces what
`ConnectionGuard` (connection_guard.py) counts, and the refusals it answers itself:

- a connection must deliver a complete request head within `header_timeout_seconds` of being
  opened or of its previous response ending (slowloris, idle sockets); a partial head gets 408;
- a head over `max_header_bytes` (request line + headers) or `max_header_count` lines gets 431
  as soon as it is seen, so an unterminated header line costs at most one read chunk of memory;
- a connection over `max_connections` / `max_connections_per_client` first makes an idle
  keep-alive connection give way; with none, its request head is read and the request gets a
  complete 503 with `Retry-After` and OpenAI's error shape, except `/health` and `/metrics`,
  which are served; past the guard's overflow allowance a new socket gets that 503 at once;
- every refusal, and a request that cannot be parsed (400), ends in a graceful close: the
  answer is written, writes are shut down (FIN) and what the client still sends is read and
  dropped for up to `_LINGER_SECONDS` and `_LINGER_BYTES`, so the client reads the answer
  instead of a reset (closing a socket with unread input makes the kernel send RST, which can
  destroy the answer still in flight); the client's own close ends the wait (uvicorn's
  `eof_received` closes the transport);
- on the server's shutdown, a connection that has sent part of a next request head gets 503
  `draining`; one that has sent nothing is closed the same graceful way.

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
import fcntl
import logging
import resource
import socket
import struct
import termios
from collections.abc import Callable
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reference_server.api.connection_guard import (
    Admission,
    ConnectionGuard,
    ConnectionLimits,
    TrustedProxies,
    forwarded_client,
)
from reference_server.api.server_config import ServerConfig
from reference_server.api.sse import ABORT_KEY, WRITE_NOW_KEY

__all__ = [
    "ABORT_KEY", "EXEMPT_PATHS", "ConnectionGuard", "ConnectionLimits", "guarded_protocol",
    "raise_open_file_limit", "uvicorn_options",
]  # fmt: skip

logger = logging.getLogger("reference_server.api")

# Orchestrators and scrapers must see the truth while clients hog the connections.
EXEMPT_PATHS = frozenset({b"/health", b"/metrics"})
# The kernel's share of what a client that stops reading costs: loopback autotuning grows a
# socket's send buffer to megabytes, so a stalled stream would be noticed only after minutes of
# generation nobody reads. Doubled by Linux; plenty for token streams and file downloads.
_SEND_BUFFER_BYTES = 65_536
# How long a refused connection keeps reading (and dropping) after its answer and FIN: enough
# for a client to finish sending its body and read the answer; its own close ends it sooner.
_LINGER_SECONDS = 2.0
# ... and at most this much (a body up to the default --max-body-bytes): a client still pushing
# after that is not reading, and its reset is its own doing.
_LINGER_BYTES = 1_048_576
_REASONS = {400: b"Bad Request", 408: b"Request Timeout",
            431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}  # fmt: skip
# code -> (status, OpenAI error type, message); Retry-After: 1 on every 503.
_REFUSALS: dict[str, tuple[int, str, str]] = {
    "server_connection_limit": (503, "service_unavailable", "the server has --max-connections "
                                "connections open and none idle to close; retry shortly"),
    "client_connection_limit": (503, "service_unavailable", "this client address has "
                                "--max-connections-per-client connections open and none idle "
                                "to close; retry shortly"),
    "client_request_limit": (503, "service_unavailable", "this client (X-Forwarded-For) has "
                             "--max-connections-per-client requests in progress through the "
                             "proxy; retry shortly"),
    "draining": (503, "service_unavailable", "server is draining (shutting down); retry on "
                 "another replica"),
    "header_timeout": (408, "invalid_request_error", "the request head did not arrive within "
                       "--header-timeout-seconds"),
    "header_too_large": (431, "invalid_request_error", "the request head is over "
                         "--max-header-bytes or --max-header-count"),
}  # fmt: skip


def refusal_bytes(code: str) -> bytes:
    """A complete HTTP/1.1 answer in OpenAI's error shape, ending the connection."""
    status, kind, message = _REFUSALS[code]
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None,
                                   "code": code}})  # fmt: skip
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n" % (status, _REASONS[status])
    if status == 503:
        head += b"retry-after: 1\r\n"
    head += b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    return head + body


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
        self.client_key = self._guard.client_key(self.peer)
        self.forwarded: str | None = None
        self._head_bytes = 0
        self._chunk_bytes = 0
        self._header_count = 0
        self._awaiting_head = True
        self._refusal: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._lingered = 0
        self._linger: asyncio.TimerHandle | None = None
        if self._guard.opened(self) is Admission.OVER_CEILING:
            self._guard.refused("server_connection_limit")
            self._answer("server_connection_limit")  # no parser state: answered unread
            return
        self._arm_deadline()

    def pending_input(self) -> int:
        """Bytes waiting in this socket's kernel receive buffer (-1: cannot tell)."""
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return -1
        try:
            return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        except OSError:
            return -1

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.closed(self)
        self._disarm_deadline()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:  # after a refusal: read and dropped until the client closes
            self._lingered += len(data)
            if self._lingered > _LINGER_BYTES:
                self.transport.close()
            return
        guard = self._guard
        guard.heard_from(self)  # a byte of a request: never the one to close
        guard.set_idle(self, False)
        self._chunk_bytes = len(data)
        if self._awaiting_head:
            self._head_bytes += len(data)
        # uvicorn's data_received, minus its warning line for what is a refusal here.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            if self._refusal is None:
                self.logger.warning("Invalid HTTP request received.")
                self._refusal = "bad_request"
            self._answer(self._refusal)
            return
        # A head still incomplete past the limit (one unterminated line): stop buffering it.
        if (
            self._awaiting_head
            and self._head_bytes > self._guard.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self._answer("header_too_large")

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
            self._refusal = "header_too_large"
            raise ValueError("request head over the limit")  # httptools: HttpParserError
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._disarm_deadline()
        guard = self._guard
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > guard.limits.max_header_bytes:
            self._refusal = "header_too_large"
            raise ValueError("request head over the limit")
        path = self.url.split(b"?", 1)[0]
        # A request pipelined behind one still being answered waits for it; a refusal written
        # now would land inside that answer.
        answering = self.cycle is not None and not self.cycle.response_complete
        if path not in EXEMPT_PATHS and not answering:
            refusal = self._over_a_cap()
            if refusal is not None:
                guard.refused(refusal)
                self._refusal = refusal
                raise ValueError("connection over a cap")
        self.scope[ABORT_KEY] = self.transport.abort  # type: ignore[literal-required]
        super().on_headers_complete()
        # The cycle just made is this request's, even when it waits behind a pipelined one.
        writer = _chunk_writer(getattr(self, "cycle", None))
        if writer is not None:
            self.scope[WRITE_NOW_KEY] = writer  # type: ignore[literal-required]

    def _over_a_cap(self) -> str | None:
        """The refusal code of this request's cap, or None when it may be served."""
        guard = self._guard
        if not guard.admit_late(self):
            limits = guard.limits
            own = guard.admitted_by_client.get(self.client_key or "", {})
            per_client = limits.max_connections_per_client
            if per_client < limits.max_connections and len(own) >= per_client:
                return "client_connection_limit"
            return "server_connection_limit"
        if self.client_key is None:  # through a trusted proxy: count its client's requests
            client = forwarded_client(
                (v for n, v in self.headers if n == b"x-forwarded-for"), guard.trusted
            )
            if client is not None and not guard.hold_forwarded(self, client):
                return "client_request_limit"
        return None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._guard.release_forwarded(self)
        if not self.transport.is_closing() and not self.pipeline and not self._lingering:
            self._awaiting_head = True
            self._head_bytes = 0
            self._guard.set_idle(self, True)
            self._arm_deadline()

    def send_400_response(self, msg: str) -> None:
        self._answer(self._refusal or "bad_request")

    def shutdown(self) -> None:
        """The server is stopping: a connection between requests is told so (503 draining)
        when part of a next head has arrived, else closed gracefully; others finish first."""
        if self._awaiting_head and (self.cycle is None or self.cycle.response_complete):
            if self._head_bytes:
                self._answer("draining")
            else:
                self._close_gracefully()
            return
        super().shutdown()

    def _answer(self, code: str) -> None:
        """A refusal's complete answer, then a graceful close; nothing more is parsed."""
        if self._lingering or self.transport.is_closing():
            return
        if code == "bad_request":
            body = b"Invalid HTTP request received."
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body)
            )
        else:
            self.transport.write(refusal_bytes(code))
        self._close_gracefully()

    def _close_gracefully(self) -> None:
        """FIN after what was written, then read and drop until the client closes or the
        linger time ends: the client reads the answer instead of a reset."""
        self._disarm_deadline()
        self._guard.set_idle(self, False)
        self._lingering = True
        transport = self.transport
        if transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()
            self._linger = self.loop.call_later(_LINGER_SECONDS, transport.close)
        else:
            transport.close()

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
        if not self._awaiting_head or self.transport.is_closing() or self._lingering:
            return
        if self._head_bytes:
            self._answer("header_timeout")  # a partial head: tell the (slow) client why
        else:
            self._close_gracefully()


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


def uvicorn_options(
    config: ServerConfig, *, on_refusal: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The uvicorn.Config keywords of the HTTP layer: parser, limits, timeouts, proxy trust.
    `on_refusal(code)` is told of each request refused at a connection cap (metrics)."""
    limits = connection_limits(config)
    guard = ConnectionGuard(
        limits, trusted=TrustedProxies(config.trusted_proxies), on_refusal=on_refusal
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
        # A burst of connections waits in the kernel's queue until accepted (Linux caps it at
        # net.core.somaxconn); a full queue makes clients retry their SYN a second later.
        "backlog": max(2048, limits.max_connections + limits.overflow_allowance),
    }


def connection_limits(config: ServerConfig) -> ConnectionLimits:
    return ConnectionLimits(
        max_connections=config.max_connections,
        max_connections_per_client=config.client_connection_cap,
        header_timeout_seconds=config.header_timeout_seconds,
        max_header_bytes=config.max_header_bytes,
        max_header_count=config.max_header_count,
    )


# Descriptors beyond the sockets: the engine's pipe, logs, Batch API files, SQLite.
_SPARE_FILES = 256


def raise_open_file_limit(config: ServerConfig) -> str | None:
    """Raises the soft RLIMIT_NOFILE (often 1,024) towards what the caps can hold open, as far
    as the hard limit allows; returns a warning when that is still too few."""
    limits = connection_limits(config)
    wanted = limits.max_connections + limits.overflow_allowance + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return None
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft >= wanted:
        return None
    return (f"open-file limit {soft} is below the {wanted} descriptors --max-connections "
            f"{limits.max_connections} can hold (with its overflow); raise `ulimit -n` or "
            "lower --max-connections")  # fmt: skip
