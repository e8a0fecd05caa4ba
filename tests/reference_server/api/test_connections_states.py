"""The guarded protocol's state changes one call at a time, on a fake transport, loop and guard:
what a finished response re-arms (and when it must not), what shutdown does between requests
and during one, that a lingering connection answers nothing more, that a graceful close marks it
busy, and when the head deadline does nothing. The loopback tests in test_connections_protocol.py
cover the same paths end to end; these reach the branches a real socket rarely shows."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from reference_server.api.connections import guarded_protocol


class _Transport:
    def __init__(self, closing: bool = False) -> None:
        self.closing = closing
        self.written: list[bytes] = []
        self.eofs = 0
        self.closes = 0

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eofs += 1

    def close(self) -> None:
        self.closes += 1
        self.closing = True


class _Handle:
    def __init__(self, delay: float, callback: Any) -> None:
        self.delay, self.callback, self.cancelled = delay, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class _Loop:
    def __init__(self) -> None:
        self.later: list[_Handle] = []

    def call_later(self, delay: float, callback: Any) -> _Handle:
        handle = _Handle(delay, callback)
        self.later.append(handle)
        return handle


class _Guard:
    def __init__(self) -> None:
        self.limits = SimpleNamespace(header_timeout_seconds=7.0)
        self.calls: list[tuple[str, Any]] = []

    def set_idle(self, conn: Any, idle: bool) -> None:
        self.calls.append(("set_idle", (conn, idle)))

    def release_forwarded(self, conn: Any) -> None:
        self.calls.append(("release_forwarded", conn))


def _protocol(**state: Any) -> Any:
    guard = _Guard()
    proto = guarded_protocol(guard).__new__(guarded_protocol(guard))
    proto._guard = guard
    defaults: dict[str, Any] = dict(
        transport=_Transport(), loop=_Loop(), server_state=SimpleNamespace(total_requests=0),
        flow=SimpleNamespace(resume_reading=lambda: None), pipeline=deque(),
        timeout_keep_alive_task=None, timeout_keep_alive=5, cycle=None, _awaiting_head=False,
        _head_bytes=0, _deadline=None, _linger=None, _lingering=False, _lingered=0,
    )  # fmt: skip
    defaults.update(state)
    for name, value in defaults.items():
        setattr(proto, name, value)
    proto._start_asgi_task = lambda cycle, app: None
    return proto


def _rearmed(proto: Any) -> bool:
    return ("set_idle", (proto, True)) in proto._guard.calls


def test_a_finished_response_re_arms_the_head_deadline() -> None:
    proto = _protocol(_head_bytes=40)
    proto.on_response_complete()
    assert proto._guard.calls == [("release_forwarded", proto), ("set_idle", (proto, True))]
    assert (proto._awaiting_head, proto._head_bytes) == (True, 0)
    assert proto._deadline is proto.loop.later[-1] and proto._deadline.delay == 7.0


@pytest.mark.parametrize(
    "state",
    [
        {"transport": _Transport(closing=True)},
        {"pipeline": deque([("cycle", "app"), ("cycle", "app")])},  # one left after uvicorn's pop
        {"_lingering": True},
    ],
    ids=["closing", "pipelined", "lingering"],
)
def test_a_finished_response_re_arms_nothing_when_the_connection_is_busy(state) -> None:
    proto = _protocol(**state)
    proto.on_response_complete()
    assert proto._guard.calls == [("release_forwarded", proto)]
    assert not _rearmed(proto) and proto._awaiting_head is False and proto._deadline is None


def test_shutdown_between_requests_closes_gracefully() -> None:
    for cycle in (None, SimpleNamespace(response_complete=True)):
        proto = _protocol(_awaiting_head=True, cycle=cycle)
        proto.shutdown()
        assert (proto.transport.eofs, proto.transport.closes, proto._lingering) == (1, 0, True)
        assert proto.transport.written == []


def test_shutdown_with_part_of_a_head_answers_draining() -> None:
    proto = _protocol(_awaiting_head=True, _head_bytes=12)
    proto.shutdown()
    assert proto.transport.written[0].startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b'"code":"draining"' in proto.transport.written[0]


def test_shutdown_after_a_head_leaves_it_to_uvicorn() -> None:
    # The head is in (not awaiting one): uvicorn closes a finished connection outright, and lets
    # one being answered finish without keep-alive.
    done = _protocol(_awaiting_head=False, cycle=SimpleNamespace(response_complete=True))
    done.shutdown()
    assert (done.transport.closes, done.transport.eofs, done._lingering) == (1, 0, False)
    busy_cycle = SimpleNamespace(response_complete=False, keep_alive=True)
    busy = _protocol(_awaiting_head=True, cycle=busy_cycle)
    busy.shutdown()
    assert busy_cycle.keep_alive is False and busy.transport.closes == 0


def test_a_lingering_connection_answers_nothing_more() -> None:
    proto = _protocol(_lingering=True)
    proto._answer("header_timeout")
    assert proto.transport.written == [] and proto.transport.eofs == 0
    closing = _protocol(transport=_Transport(closing=True))
    closing._answer("header_timeout")
    assert closing.transport.written == []
    fresh = _protocol()
    fresh._answer("header_timeout")
    assert fresh.transport.written[0].startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert fresh.transport.eofs == 1


def test_a_graceful_close_marks_the_connection_busy_and_lingers() -> None:
    proto = _protocol()
    proto._close_gracefully()
    assert proto._guard.calls == [("set_idle", (proto, False))]
    assert proto._lingering is True and proto.transport.eofs == 1
    assert proto._linger is proto.loop.later[-1] and proto._linger.delay == 2.0


@pytest.mark.parametrize(
    "state",
    [
        {"_awaiting_head": False},
        {"_awaiting_head": True, "transport": _Transport(closing=True)},
        {"_awaiting_head": True, "_lingering": True},
    ],
    ids=["head-in", "closing", "lingering"],
)
def test_the_head_deadline_does_nothing_once_moot(state) -> None:
    proto = _protocol(**state)
    proto._deadline = "armed"
    proto._head_timed_out()
    assert proto._deadline is None
    assert proto._guard.calls == [] and proto.transport.eofs == 0 and proto.transport.written == []


def test_the_head_deadline_closes_a_silent_connection_and_answers_a_partial_head() -> None:
    silent = _protocol(_awaiting_head=True)
    silent._head_timed_out()
    assert silent.transport.written == [] and silent.transport.eofs == 1
    partial = _protocol(_awaiting_head=True, _head_bytes=5)
    partial._head_timed_out()
    assert partial.transport.written[0].startswith(b"HTTP/1.1 408 Request Timeout\r\n")


class _CapGuard(_Guard):
    def __init__(self) -> None:
        super().__init__()
        self.limits = SimpleNamespace(
            header_timeout_seconds=7.0, max_header_bytes=1024, max_connections=4,
            max_connections_per_client=2,
        )  # fmt: skip
        self.admitted_by_client: dict[str, dict[Any, None]] = {"127.0.0.9": {1: None, 2: None}}
        self.refusals: list[str] = []

    def admit_late(self, conn: Any) -> bool:
        return False

    def refused(self, code: str) -> None:
        self.refusals.append(code)


def _capped(url: bytes, cycle: Any, monkeypatch) -> Any:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    started: list[Any] = []
    monkeypatch.setattr(HttpToolsProtocol, "on_headers_complete", lambda self: started.append(self))
    guard = _CapGuard()
    proto = _protocol(url=url, headers=[(b"host", b"x")], scope={}, cycle=cycle, _refusal=None)
    proto._guard = guard
    proto.client_key = "127.0.0.5"
    proto.transport.abort = lambda: None
    proto.started = started
    return proto


def test_a_client_with_no_connection_over_the_server_cap_is_told_the_server_limit(
    monkeypatch,
) -> None:
    proto = _capped(b"/x", None, monkeypatch)
    assert proto._over_a_cap() == "server_connection_limit"
    proto.client_key = "127.0.0.9"  # holds its 2 of 2
    assert proto._over_a_cap() == "client_connection_limit"


def test_a_head_over_a_cap_is_refused_unless_a_response_is_still_being_written(
    monkeypatch,
) -> None:
    finished = _capped(b"/x", SimpleNamespace(response_complete=True), monkeypatch)
    with pytest.raises(ValueError):
        finished.on_headers_complete()
    assert finished._guard.refusals == ["server_connection_limit"]
    assert finished._refusal == "server_connection_limit" and finished.started == []
    # Pipelined behind an answer still being written: a refusal now would land inside it.
    answering = _capped(b"/x", SimpleNamespace(response_complete=False), monkeypatch)
    answering.on_headers_complete()
    assert answering._guard.refusals == [] and answering._refusal is None
    assert answering.started == [answering]


def test_an_exempt_path_is_served_over_a_cap_whatever_its_query(monkeypatch) -> None:
    for url in (b"/health", b"/health?a=1?b=2", b"/metrics?x?y"):
        proto = _capped(url, None, monkeypatch)
        proto.on_headers_complete()
        assert proto._guard.refusals == [] and proto.started == [proto]
    proto = _capped(b"/healthz?a", None, monkeypatch)
    with pytest.raises(ValueError):
        proto.on_headers_complete()


class _Socket:
    def __init__(self, peer: Any) -> None:
        self.peer = peer
        self.options: list[tuple] = []

    def getpeername(self) -> Any:
        if self.peer is None:
            raise OSError("not connected")  # what uvicorn reads as "no client address"
        return self.peer

    def getsockname(self) -> Any:
        return ("127.0.0.1", 8000)

    def setsockopt(self, *args: Any) -> None:
        self.options.append(args)
        raise OSError("not supported here")


class _OpenGuard(_Guard):
    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def client_key(self, peer: str) -> str:
        self.keys.append(peer)
        return peer

    def opened(self, conn: Any) -> Any:
        from reference_server.api.connection_guard import Admission

        return Admission.ADMITTED


def _made(peer: Any) -> Any:
    import logging

    sock = _Socket(peer)
    transport = _Transport()
    transport.get_extra_info = lambda name, default=None: sock if name == "socket" else default
    proto = _protocol(connections=set(), logger=logging.getLogger("test.connections.states"))
    proto._guard = _OpenGuard()
    proto.logger.setLevel(logging.WARNING)
    proto.connection_made(transport)
    return proto, sock


def test_a_socket_refusing_the_send_buffer_size_is_still_served() -> None:
    proto, sock = _made(("127.0.0.5", 4321))
    assert len(sock.options) == 1  # tried, refused (OSError), carried on
    assert (proto.peer, proto.client_key, proto._guard.keys) == (
        "127.0.0.5",
        "127.0.0.5",
        ["127.0.0.5"],
    )
    assert proto._deadline is proto.loop.later[-1]


def test_a_connection_without_a_client_address_has_the_empty_peer() -> None:
    proto, _ = _made(None)
    assert proto.client is None
    assert (proto.peer, proto._guard.keys) == ("", [""])


def test_lingering_input_is_counted_across_reads_up_to_the_linger_bytes() -> None:
    proto = _protocol(_lingering=True)
    proto.data_received(b"x" * 600_000)
    assert (proto._lingered, proto.transport.closes) == (600_000, 0)
    proto.data_received(b"x" * 448_576)  # exactly 1 MiB in all: still read
    assert (proto._lingered, proto.transport.closes) == (1_048_576, 0)
    proto.data_received(b"x")
    assert (proto._lingered, proto.transport.closes) == (1_048_577, 1)
    assert proto._guard.calls == []  # dropped unparsed: the guard hears nothing of it


class _Parser:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.fed: list[bytes] = []

    def feed_data(self, data: bytes) -> None:
        self.fed.append(data)
        if self.error is not None:
            raise self.error


class _HearingGuard(_Guard):
    def __init__(self, max_header_bytes: int = 10) -> None:
        super().__init__()
        self.limits = SimpleNamespace(header_timeout_seconds=7.0, max_header_bytes=max_header_bytes)
        self.closed_conns: list[Any] = []

    def heard_from(self, conn: Any) -> None:
        self.calls.append(("heard_from", conn))

    def closed(self, conn: Any) -> None:
        self.closed_conns.append(conn)


def _hearing(parser: _Parser, **state: Any) -> Any:
    import logging

    proto = _protocol(
        parser=parser, _refusal=None, logger=logging.getLogger("test.conn.hearing"), **state
    )
    proto._guard = _HearingGuard()
    return proto


def test_an_unfinished_head_is_refused_only_past_the_byte_limit() -> None:
    proto = _hearing(_Parser(), _awaiting_head=True)
    proto.data_received(b"GET /abcde")  # 10 bytes: at the limit
    assert proto.transport.written == [] and proto._head_bytes == 10
    proto.data_received(b"f")
    assert proto.transport.written[0].startswith(b"HTTP/1.1 431 ")


def test_an_unparsable_request_is_logged_once_and_answered_400(caplog) -> None:
    import httptools

    proto = _hearing(_Parser(httptools.HttpParserError("bad")), _awaiting_head=True)
    with caplog.at_level("WARNING", logger="test.conn.hearing"):
        proto.data_received(b"NOT HTTP\r\n\r\n")
    assert [r.getMessage() for r in caplog.records] == ["Invalid HTTP request received."]
    assert proto.transport.written[0].startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_a_lost_connection_is_closed_in_the_guard_and_uvicorn() -> None:
    for exc, closes in ((None, 1), (ConnectionResetError("reset"), 0)):
        proto = _hearing(
            _Parser(), connections=set(), _linger=_Handle(2.0, None), client=None, flow=None
        )
        proto.connections.add(proto)
        proto.connection_lost(exc)
        assert proto._guard.closed_conns == [proto] and proto.connections == set()
        assert proto._linger.cancelled and proto.transport.closes == closes  # uvicorn closes on EOF
