"""The server's HTTP/1.1 protocol (connections.py) in-process: the server's own protocol class on
a loopback port, a tiny ASGI app, raw client sockets. Header limits (431), the head deadline
(408 or a quiet close), malformed requests (400), the connection caps (503 with OpenAI's error
shape, /health exempt), the ceiling (503 unread), a trusted proxy's forwarded clients, draining,
the graceful close after a refusal, and the uvicorn options built from a ServerConfig.
Loopback only; no assertion depends on the machine's speed (deadlines are waited for, never
raced)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from reference_server.api import connections as conn_mod
from reference_server.api.connection_guard import ConnectionGuard, ConnectionLimits, TrustedProxies
from reference_server.api.connections import (
    ABORT_KEY,
    EXEMPT_PATHS,
    guarded_protocol,
    raise_open_file_limit,
    refusal_bytes,
    uvicorn_options,
)
from reference_server.api.server_config import ServerConfig

_WAIT = 30.0  # generous: a deadline is awaited, never raced


def _limits(**kw: Any) -> ConnectionLimits:
    base: dict[str, Any] = dict(
        max_connections=8, max_connections_per_client=8, header_timeout_seconds=30.0,
        max_header_bytes=1024, max_header_count=8,
    )  # fmt: skip
    base.update(kw)
    return ConnectionLimits(**base)


class _Server:
    def __init__(self, guard: ConnectionGuard, state: ServerState, port: int) -> None:
        self.guard, self.state, self.port = guard, state, port
        self.release = asyncio.Event()  # a /hold request is answered once this is set
        self.scopes: list[dict[str, Any]] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def until(self, predicate: Any) -> None:
        for _ in range(int(_WAIT / 0.005)):
            if predicate():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("condition not reached")


@contextlib.asynccontextmanager
async def _serve(limits: ConnectionLimits, proxies: str | None = None, refusals: list | None = None
                 ) -> AsyncIterator[_Server]:  # fmt: skip
    holder: dict[str, _Server] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        server = holder["server"]
        server.scopes.append(scope)
        if scope["path"] == "/hold":
            await server.release.wait()
        body = b"ok " + scope["path"].encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    config = Config(app=app, lifespan="off", log_level="critical")
    config.load()
    state = ServerState()
    guard = ConnectionGuard(
        limits, trusted=TrustedProxies(proxies),
        on_refusal=refusals.append if refusals is not None else None,
    )  # fmt: skip
    protocol = guarded_protocol(guard)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    holder["server"] = _Server(guard, state, server.sockets[0].getsockname()[1])
    try:
        yield holder["server"]
    finally:
        holder["server"].release.set()
        server.close()
        for connection in list(state.connections):
            connection.transport.close()
        await server.wait_closed()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _WAIT)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), _WAIT)
    return status, headers, body


async def _read_rest(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes]:
    """Headers and body of an answer whose status line was already read."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _WAIT)
    headers = {}
    for line in head.decode("latin-1").split("\r\n"):
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), _WAIT)
    return headers, body


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), _WAIT)


def _get(path: str = "/x", extra: bytes = b"") -> bytes:
    return b"GET %b HTTP/1.1\r\nHost: h\r\n%b\r\n" % (path.encode(), extra)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- refusal answers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "flag"),
    [
        ("server_connection_limit", 503, "--max-connections"),
        ("client_connection_limit", 503, "--max-connections-per-client"),
        ("client_request_limit", 503, "--max-connections-per-client"),
        ("draining", 503, "draining"),
        ("header_timeout", 408, "--header-timeout-seconds"),
        ("header_too_large", 431, "--max-header-bytes or --max-header-count"),
    ],
)
def test_each_refusal_has_its_status_type_and_a_message_naming_the_cause(code, status, flag):
    raw = refusal_bytes(code)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    reasons = {503: "Service Unavailable", 408: "Request Timeout",
               431: "Request Header Fields Too Large"}  # fmt: skip
    assert lines[0] == f"HTTP/1.1 {status} {reasons[status]}"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["content-type"] == "application/json"
    assert ("retry-after" in headers) == (status == 503)
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    error = orjson.loads(body)["error"]
    assert error["code"] == code and error["param"] is None
    assert error["type"] == ("service_unavailable" if status == 503 else "invalid_request_error")
    assert flag in error["message"]


def test_only_health_and_metrics_are_exempt() -> None:
    assert {b"/health", b"/metrics"} == EXEMPT_PATHS


# -- header limits ----------------------------------------------------------------------------


def test_a_head_at_the_header_count_is_served_and_one_more_header_is_refused_431() -> None:
    async def main() -> None:
        async with _serve(_limits(max_header_count=8)) as server:
            at = b"".join(b"x-%d: v\r\n" % i for i in range(7))  # + Host: 8 headers
            reader, writer = await server.connect()
            writer.write(_get("/a", at))
            status, _, body = await _read_answer(reader)
            assert (status, body) == (200, b"ok /a")
            writer.write(_get("/b", at + b"x-last: v\r\n"))
            status, _headers, body = await _read_answer(reader)
            assert status == 431 and orjson.loads(body)["error"]["code"] == "header_too_large"
            assert await _read_to_eof(reader) == b""
            writer.close()

    _run(main())


def test_the_head_size_counts_url_names_and_values_up_to_the_limit() -> None:
    # size = len(url) + sum(len(name) + len(value) + 4): "/x" + "host"+"h"+4 + "x-pad"+k+4.
    async def main() -> None:
        async with _serve(_limits(max_header_bytes=1024)) as server:
            fits = 1024 - 2 - (4 + 1 + 4) - (5 + 4)
            reader, writer = await server.connect()
            writer.write(_get("/x", b"x-pad: " + b"p" * fits + b"\r\n"))
            assert (await _read_answer(reader))[0] == 200
            writer.write(_get("/x", b"x-pad: " + b"p" * (fits + 1) + b"\r\n"))
            assert (await _read_answer(reader))[0] == 431
            writer.close()

    _run(main())


def test_one_header_value_over_the_byte_limit_is_refused_431() -> None:
    async def main() -> None:
        async with _serve(_limits(max_header_bytes=1024)) as server:
            reader, writer = await server.connect()
            # The value alone is over the limit; the parser sees it before the head ends.
            writer.write(b"GET /x HTTP/1.1\r\nx-big: " + b"v" * 1025 + b"\r\n")
            status, _, body = await _read_answer(reader)
            assert status == 431 and orjson.loads(body)["error"]["code"] == "header_too_large"
            writer.close()

    _run(main())


def test_an_unterminated_header_line_is_refused_once_it_passes_the_limit() -> None:
    async def main() -> None:
        async with _serve(_limits(max_header_bytes=1024)) as server:
            reader, writer = await server.connect()
            start = b"GET /x HTTP/1.1\r\nx-endless: "
            writer.write(start + b"v" * (1024 - len(start)))  # exactly the limit: still read
            await writer.drain()
            await server.until(lambda: not server.guard.silent)
            writer.write(b"v")  # one byte over
            status, _, _ = await _read_answer(reader)
            assert status == 431
            writer.close()

    _run(main())


def test_a_malformed_request_gets_a_complete_400_and_a_graceful_close() -> None:
    async def main() -> None:
        async with _serve(_limits()) as server:
            reader, writer = await server.connect()
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            assert (await reader.readuntil(b"\r\n")) == b"HTTP/1.1 400 Bad Request\r\n"
            status, headers, body = 400, *(await _read_rest(reader))
            assert status == 400 and body == b"Invalid HTTP request received."
            assert headers["connection"] == "close"
            assert headers["content-type"] == "text/plain; charset=utf-8"
            writer.write(b"more bytes the client still sends")  # read and dropped
            assert await _read_to_eof(reader) == b""
            writer.close()

    _run(main())


# -- the head deadline ------------------------------------------------------------------------


def test_a_partial_head_past_the_deadline_gets_408_and_nothing_sent_is_closed_quietly() -> None:
    async def main() -> None:
        async with _serve(_limits(header_timeout_seconds=0.2)) as server:
            partial_r, partial_w = await server.connect()
            quiet_r, quiet_w = await server.connect()
            partial_w.write(b"GET /x HT")
            status, _, body = await _read_answer(partial_r)
            assert status == 408 and orjson.loads(body)["error"]["code"] == "header_timeout"
            assert await _read_to_eof(quiet_r) == b""  # nothing to answer: FIN only
            partial_w.close(), quiet_w.close()

    _run(main())


def test_after_a_response_the_deadline_runs_again_for_the_next_head() -> None:
    async def main() -> None:
        async with _serve(_limits(header_timeout_seconds=0.2)) as server:
            reader, writer = await server.connect()
            writer.write(_get("/a"))
            assert (await _read_answer(reader))[2] == b"ok /a"
            writer.write(_get("/b"))  # keep-alive: a second request on the same connection
            assert (await _read_answer(reader))[2] == b"ok /b"
            writer.write(b"GET /c")  # a partial next head: told why once its deadline passes
            assert (await _read_answer(reader))[0] == 408
            writer.close()

    _run(main())


def test_a_slow_request_being_answered_is_never_cut_by_the_head_deadline() -> None:
    async def main() -> None:
        async with _serve(_limits(header_timeout_seconds=0.1)) as server:
            reader, writer = await server.connect()
            writer.write(_get("/hold"))
            await server.until(lambda: len(server.scopes) == 1)
            await asyncio.sleep(0.3)  # past the head deadline, while the app answers
            server.release.set()
            assert (await _read_answer(reader))[2] == b"ok /hold"
            writer.close()

    _run(main())


# -- connection caps --------------------------------------------------------------------------


def test_over_the_per_client_cap_a_request_is_refused_503_but_health_is_served() -> None:
    refusals: list[str] = []

    async def main() -> None:
        async with _serve(_limits(max_connections=4, max_connections_per_client=1),
                          refusals=refusals) as server:  # fmt: skip
            first_r, first_w = await server.connect()
            first_w.write(_get("/hold"))
            await server.until(lambda: len(server.scopes) == 1)
            second_r, second_w = await server.connect()
            second_w.write(_get("/x"))
            status, headers, body = await _read_answer(second_r)
            assert status == 503 and headers["retry-after"] == "1"
            assert orjson.loads(body)["error"]["code"] == "client_connection_limit"
            assert refusals == ["client_connection_limit"]
            third_r, third_w = await server.connect()
            third_w.write(_get("/health"))
            assert (await _read_answer(third_r))[:3:2] == (200, b"ok /health")
            fourth_r, fourth_w = await server.connect()
            fourth_w.write(_get("/metrics?x=1"))
            assert (await _read_answer(fourth_r))[0] == 200
            server.release.set()
            assert (await _read_answer(first_r))[2] == b"ok /hold"
            for w in (first_w, second_w, third_w, fourth_w):
                w.close()

    _run(main())


def test_over_the_server_cap_the_refusal_names_the_server_limit() -> None:
    refusals: list[str] = []

    async def main() -> None:
        async with _serve(_limits(max_connections=1, max_connections_per_client=1),
                          refusals=refusals) as server:  # fmt: skip
            first_r, first_w = await server.connect()
            first_w.write(_get("/hold"))
            await server.until(lambda: len(server.scopes) == 1)
            other_r, other_w = await server.connect()
            other_w.write(_get("/x"))
            status, _, body = await _read_answer(other_r)
            assert status == 503
            assert orjson.loads(body)["error"]["code"] == "server_connection_limit"
            assert refusals == ["server_connection_limit"]
            assert await _read_to_eof(other_r) == b""
            server.release.set()
            await _read_answer(first_r)
            first_w.close(), other_w.close()

    _run(main())


def test_an_idle_keep_alive_connection_gives_way_to_a_new_one() -> None:
    async def main() -> None:
        async with _serve(_limits(max_connections=1, max_connections_per_client=1)) as server:
            idle_r, idle_w = await server.connect()
            idle_w.write(_get("/a"))
            await _read_answer(idle_r)  # answered: idle between requests
            await server.until(lambda: len(server.guard.idle) == 1)
            new_r, new_w = await server.connect()
            new_w.write(_get("/b"))
            assert (await _read_answer(new_r))[2] == b"ok /b"
            assert await _read_to_eof(idle_r) == b""
            idle_w.close(), new_w.close()

    _run(main())


def test_past_the_ceiling_a_new_connection_is_answered_503_unread() -> None:
    refusals: list[str] = []

    async def main() -> None:
        limits = _limits(max_connections=1, max_connections_per_client=1, overflow_connections=1)
        async with _serve(limits, refusals=refusals) as server:
            held = []
            for _ in range(2):  # one admitted, one overflow; both have sent a byte
                r, w = await server.connect()
                w.write(b"GET /")
                held.append((r, w))
            await server.until(lambda: len(server.guard.open) == 2 and not server.guard.silent)
            r, w = await server.connect()
            status, _, body = await _read_answer(r)  # sent nothing, answered anyway
            assert status == 503
            assert orjson.loads(body)["error"]["code"] == "server_connection_limit"
            assert refusals == ["server_connection_limit"]
            w.close()
            for _, hw in held:
                hw.close()

    _run(main())


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_cap() -> None:
    refusals: list[str] = []

    async def main() -> None:
        limits = _limits(max_connections=8, max_connections_per_client=1)
        async with _serve(limits, proxies="127.0.0.1", refusals=refusals) as server:
            fwd = b"x-forwarded-for: 203.0.113.9\r\n"
            a_r, a_w = await server.connect()
            a_w.write(_get("/hold", fwd))
            await server.until(lambda: len(server.scopes) == 1)
            b_r, b_w = await server.connect()
            b_w.write(_get("/x", fwd))
            status, _, body = await _read_answer(b_r)
            assert status == 503
            assert orjson.loads(body)["error"]["code"] == "client_request_limit"
            c_r, c_w = await server.connect()
            c_w.write(_get("/y", b"x-forwarded-for: 198.51.100.7\r\n"))
            assert (await _read_answer(c_r))[2] == b"ok /y"  # another client: served
            d_r, d_w = await server.connect()
            d_w.write(_get("/z"))  # the proxy's own request: no forwarded client, served
            assert (await _read_answer(d_r))[2] == b"ok /z"
            server.release.set()
            await _read_answer(a_r)
            await server.until(lambda: not server.guard.forwarded_busy)
            assert refusals == ["client_request_limit"]
            for w in (a_w, b_w, c_w, d_w):
                w.close()

    _run(main())


# -- the scope, the socket --------------------------------------------------------------------


def test_the_scope_carries_an_abort_and_the_send_buffer_is_bounded() -> None:
    async def main() -> None:
        async with _serve(_limits()) as server:
            reader, writer = await server.connect()
            writer.write(_get("/a"))
            await _read_answer(reader)
            assert callable(server.scopes[0][ABORT_KEY])
            (protocol,) = server.state.connections
            sock = protocol.transport.get_extra_info("socket")
            # Linux doubles what is asked (socket(7)).
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * 65_536
            writer.write(b"GET /b")
            await writer.drain()
            await server.until(lambda: protocol.pending_input() == 0 and protocol._head_bytes)
            writer.close()

    _run(main())


def test_pending_input_counts_the_bytes_waiting_in_the_kernel() -> None:
    a, b = socket.socketpair()
    try:
        b.sendall(b"12345")
        probe = SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda name: a))
        assert conn_mod._GuardedBase.pending_input(probe) == 5
        none = SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda name: None))
        assert conn_mod._GuardedBase.pending_input(none) == -1
        a.close()

        class _Closed:
            def fileno(self) -> int:
                return 10_000_000  # no such descriptor: the ioctl fails

        gone = SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda name: _Closed()))
        assert conn_mod._GuardedBase.pending_input(gone) == -1
    finally:
        a.close(), b.close()


# -- draining ---------------------------------------------------------------------------------


def test_on_shutdown_a_partial_next_head_gets_503_draining_and_a_quiet_one_is_closed() -> None:
    async def main() -> None:
        async with _serve(_limits()) as server:
            part_r, part_w = await server.connect()
            part_w.write(_get("/a"))
            await _read_answer(part_r)
            part_w.write(b"GET /ne")
            quiet_r, quiet_w = await server.connect()
            quiet_w.write(_get("/b"))
            await _read_answer(quiet_r)
            busy_r, busy_w = await server.connect()
            busy_w.write(_get("/hold"))
            await server.until(
                lambda: (
                    len(server.scopes) == 3
                    and len(server.guard.open) == 3
                    and sum(c._head_bytes > 0 for c in server.state.connections) == 2
                )
            )
            for connection in list(server.state.connections):
                connection.shutdown()
            status, _, body = await _read_answer(part_r)
            assert status == 503 and orjson.loads(body)["error"]["code"] == "draining"
            assert await _read_to_eof(quiet_r) == b""
            server.release.set()  # the one being answered finishes first
            assert (await _read_answer(busy_r))[2] == b"ok /hold"
            for w in (part_w, quiet_w, busy_w):
                w.close()

    _run(main())


# -- the linger after a refusal ---------------------------------------------------------------


def test_after_a_refusal_input_is_dropped_up_to_the_linger_bytes(monkeypatch) -> None:
    monkeypatch.setattr(conn_mod, "_LINGER_BYTES", 10)

    async def main() -> None:
        async with _serve(_limits()) as server:
            reader, writer = await server.connect()
            writer.write(b"BAD\r\n\r\n")
            assert (await _read_answer(reader))[0] == 400
            (protocol,) = server.state.connections
            writer.write(b"0123456789")  # exactly the allowance: still lingering
            await server.until(lambda: protocol._lingered == 10)
            assert not protocol.transport.is_closing()
            writer.write(b"x")  # past it: closed
            await server.until(lambda: protocol.transport.is_closing())
            writer.close()

    _run(main())


def test_a_lingering_connection_is_closed_after_the_linger_time(monkeypatch) -> None:
    monkeypatch.setattr(conn_mod, "_LINGER_SECONDS", 0.05)

    async def main() -> None:
        async with _serve(_limits()) as server:
            reader, writer = await server.connect()
            writer.write(b"BAD\r\n\r\n")
            assert (await _read_answer(reader))[0] == 400
            (protocol,) = server.state.connections
            await server.until(lambda: protocol.transport.is_closing())
            writer.close()

    _run(main())


# -- the chunk writer -------------------------------------------------------------------------


def _cycle(**kw: Any) -> SimpleNamespace:
    written: list[bytes] = []
    transport = SimpleNamespace(write=written.append, is_closing=lambda: kw.pop("_closing", False))
    base = dict(
        scope={"method": "GET"}, transport=transport, flow=SimpleNamespace(write_paused=False),
        disconnected=False, response_started=True, response_complete=False,
        chunked_encoding=True,
    )  # fmt: skip
    base.update(kw)
    cycle = SimpleNamespace(**base)
    cycle.written = written
    return cycle


def test_the_chunk_writer_writes_only_an_open_chunked_body() -> None:
    cycle = _cycle()
    write = conn_mod._chunk_writer(cycle)
    assert write is not None
    assert write(b"hello") is True and write(b"") is True
    assert cycle.written == [b"5\r\nhello\r\n"]
    assert write(b"x" * 17) and cycle.written[-1] == b"11\r\n" + b"x" * 17 + b"\r\n"
    for field_, value in [("disconnected", True), ("response_started", False),
                          ("response_complete", True), ("chunked_encoding", False),
                          ("chunked_encoding", None)]:  # fmt: skip
        c = _cycle(**{field_: value})
        assert conn_mod._chunk_writer(c)(b"x") is False and c.written == [], field_
    paused = _cycle(flow=SimpleNamespace(write_paused=True))
    assert conn_mod._chunk_writer(paused)(b"x") is False
    closing = _cycle()
    closing.transport.is_closing = lambda: True
    assert conn_mod._chunk_writer(closing)(b"x") is False and closing.written == []


def test_no_chunk_writer_without_the_fields_it_reads_or_for_head() -> None:
    assert conn_mod._chunk_writer(None) is None
    assert conn_mod._chunk_writer(_cycle(scope={"method": "HEAD"})) is None
    assert conn_mod._chunk_writer(_cycle(flow=SimpleNamespace())) is None
    for name in conn_mod._CYCLE_FIELDS:
        c = _cycle()
        delattr(c, name)
        assert conn_mod._chunk_writer(c) is None, name
    assert conn_mod._CYCLE_FIELDS == (
        "scope", "transport", "flow", "disconnected", "response_started", "response_complete",
        "chunked_encoding",
    )  # fmt: skip


# -- options from the config ------------------------------------------------------------------


def test_uvicorn_options_follow_the_config() -> None:
    seen: list[str] = []
    config = ServerConfig(max_connections=100, max_connections_per_client=10,
                          header_timeout_seconds=3.0, max_header_bytes=2048, max_header_count=20,
                          keep_alive_timeout_seconds=7.0, log_level="warning", access_log=True,
                          trusted_proxies="127.0.0.2")  # fmt: skip
    options = uvicorn_options(config, on_refusal=seen.append)
    guard = options["http"]._guard
    assert guard.limits == ConnectionLimits(
        max_connections=100, max_connections_per_client=10, header_timeout_seconds=3.0,
        max_header_bytes=2048, max_header_count=20,
    )  # fmt: skip
    assert "127.0.0.2" in guard.trusted and "127.0.0.1" not in guard.trusted
    guard.refused("draining")
    assert seen == ["draining"]
    assert options["ws"] == "none" and options["log_level"] == "warning"
    assert options["access_log"] is True and options["limit_concurrency"] is None
    assert options["timeout_keep_alive"] == 7.0
    assert options["proxy_headers"] is True and options["forwarded_allow_ips"] == "127.0.0.2"
    assert options["backlog"] == 2048
    assert set(options) == {"http", "ws", "log_level", "access_log", "limit_concurrency",
                            "timeout_keep_alive", "proxy_headers", "forwarded_allow_ips",
                            "backlog"}  # fmt: skip
    plain = uvicorn_options(ServerConfig(max_connections=3000))
    assert plain["proxy_headers"] is False and plain["forwarded_allow_ips"] == ""
    assert plain["backlog"] == 6000  # the cap plus its overflow allowance
    assert not plain["http"]._guard.trusted and plain["http"]._guard.on_refusal is None
    assert plain["http"]._guard.limits.max_connections_per_client == 3000


class _Limits:
    def __init__(self, soft: int, hard: int, *, refuse: type[Exception] | None = None) -> None:
        self.soft, self.hard, self.refuse = soft, hard, refuse
        self.calls: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.calls.append(value)
        if self.refuse is not None:
            raise self.refuse("not permitted")
        self.soft = value[0]


@pytest.mark.parametrize(
    ("soft", "hard", "refuse", "calls", "warns"),
    [
        (200, 1_000_000, None, [(456, 1_000_000)], False),  # raised to what the caps hold
        (200, resource.RLIM_INFINITY, None, [(456, resource.RLIM_INFINITY)], False),
        (456, 1_000_000, None, [], False),  # exactly enough already
        (resource.RLIM_INFINITY, resource.RLIM_INFINITY, None, [], False),
        (100, 300, None, [(300, 300)], True),  # the hard limit stops short
        (100, 1_000_000, ValueError, [(456, 1_000_000)], True),  # refused by the system
        (100, 1_000_000, OSError, [(456, 1_000_000)], True),  # refused by the system
        (300, 300, None, [], True),  # nothing to raise
    ],
)
def test_raise_open_file_limit(monkeypatch, soft, hard, refuse, calls, warns) -> None:
    fake = _Limits(soft, hard, refuse=refuse)
    monkeypatch.setattr(conn_mod.resource, "getrlimit", fake.getrlimit)
    monkeypatch.setattr(conn_mod.resource, "setrlimit", fake.setrlimit)
    # 100 connections + an overflow allowance of max(32, 100) + 256 spare descriptors = 456.
    warning = raise_open_file_limit(ServerConfig(max_connections=100))
    assert fake.calls == calls
    if warns:
        assert warning == (
            f"open-file limit {min(fake.soft, 300) if not refuse else 100} is below the 456 "
            "descriptors --max-connections 100 can hold (with its overflow); raise `ulimit -n` "
            "or lower --max-connections"
        )
    else:
        assert warning is None


def test_uvicorns_400_path_answers_with_the_refusal_it_found() -> None:
    # uvicorn calls send_400_response for requests its own checks reject: the answer is the
    # refusal this protocol already chose (431 for a head over the limits), else a plain 400.
    async def main() -> None:
        async with _serve(_limits()) as server:
            for refusal, status in ((None, 400), ("header_too_large", 431)):
                reader, writer = await server.connect()
                writer.write(b"GET /")
                await server.until(lambda: not server.guard.silent)
                (protocol,) = [c for c in server.state.connections if not c._lingering]
                protocol._refusal = refusal
                protocol.send_400_response("invalid")
                assert (await _read_answer(reader))[0] == status
                assert await _read_to_eof(reader) == b""
                writer.close()

    _run(main())
