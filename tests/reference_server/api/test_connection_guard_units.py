"""The connection guard's accounting (connection_guard.py) and the refusal bytes, no server."""

from __future__ import annotations

import json

from reference_server.api.connection_guard import (
    Admission,
    ConnectionGuard,
    ConnectionLimits,
    TrustedProxies,
    forwarded_client,
)
from reference_server.api.connections import refusal_bytes


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Conn:
    def __init__(self, guard: ConnectionGuard, peer: str) -> None:
        self.peer = peer
        self.client_key = guard.client_key(peer)
        self.transport = _Transport()
        self.pending = 0  # bytes waiting in the kernel buffer

    def pending_input(self) -> int:
        return self.pending


def _guard(total: int, per_client: int, overflow: int = 0, proxies: str | None = None):
    limits = ConnectionLimits(
        max_connections=total, max_connections_per_client=per_client, header_timeout_seconds=1.0,
        max_header_bytes=4096, max_header_count=50, overflow_connections=overflow,
    )  # fmt: skip
    return ConnectionGuard(limits, trusted=TrustedProxies(proxies))


def test_a_connection_that_has_not_finished_its_first_request_is_never_closed_for_another():
    guard = _guard(total=10, per_client=2)
    first = [_Conn(guard, "1.1.1.1") for _ in range(2)]
    assert all(guard.opened(c) is Admission.ADMITTED for c in first)
    late = _Conn(guard, "1.1.1.1")
    assert guard.opened(late) is Admission.OVERFLOW  # answered 503 once its head is read
    assert not any(c.transport.closed for c in first)
    assert guard.num_evicted == 0


def test_an_idle_keep_alive_connection_gives_way_and_a_busy_one_does_not():
    guard = _guard(total=10, per_client=2)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    guard.opened(a), guard.opened(b)
    guard.set_idle(b, True)  # b answered a request and waits for the next
    c = _Conn(guard, "1.1.1.1")
    assert guard.opened(c) is Admission.ADMITTED
    assert b.transport.closed and not a.transport.closed
    guard.closed(b)  # its connection_lost, later: counted once only
    assert len(guard.admitted) == 2 and len(guard.open) == 2


def test_an_overflow_connection_is_admitted_when_a_place_frees_before_its_head_is_read():
    guard = _guard(total=1, per_client=1)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    assert guard.opened(a) is Admission.ADMITTED and guard.opened(b) is Admission.OVERFLOW
    assert not guard.admit_late(b)
    guard.closed(a)
    assert guard.admit_late(b) and guard.is_admitted(b)


def test_past_the_overflow_allowance_a_connection_is_over_the_ceiling():
    guard = _guard(total=2, per_client=2, overflow=3)
    conns = [_Conn(guard, f"10.0.0.{i}") for i in range(7)]
    admissions = []
    for conn in conns:
        admissions.append(guard.opened(conn))
        guard.heard_from(conn)  # each sends its request at once
    assert (
        admissions
        == [Admission.ADMITTED] * 2 + [Admission.OVERFLOW] * 3 + [Admission.OVER_CEILING] * 2
    )
    # The default allowance keeps a burst of twice the cap answerable after reading its head.
    assert _guard(total=2048, per_client=2048).limits.overflow_allowance == 2048
    assert _guard(total=4, per_client=4).limits.overflow_allowance == 32


def test_behind_a_trusted_proxy_the_per_client_cap_counts_each_forwarded_clients_requests():
    guard = _guard(total=100, per_client=2, proxies="127.0.0.2, 10.0.0.0/8")
    conns = [_Conn(guard, "127.0.0.2") for _ in range(5)]
    assert all(c.client_key is None for c in conns)  # the proxy itself: total cap only
    assert all(guard.opened(c) is Admission.ADMITTED for c in conns)
    assert guard.hold_forwarded(conns[0], "203.0.113.9")
    assert guard.hold_forwarded(conns[1], "203.0.113.9")
    assert not guard.hold_forwarded(conns[2], "203.0.113.9")
    assert guard.hold_forwarded(conns[2], "198.51.100.7")  # another client behind it
    guard.release_forwarded(conns[0])  # its response completed
    assert guard.hold_forwarded(conns[3], "203.0.113.9")
    guard.closed(conns[1])
    assert guard.forwarded_busy == {"203.0.113.9": 1, "198.51.100.7": 1}


def test_the_forwarded_client_is_the_rightmost_address_not_a_trusted_proxy():
    trusted = TrustedProxies("127.0.0.2, 10.0.0.0/8")
    assert forwarded_client([b"203.0.113.9"], trusted) == "203.0.113.9"
    assert forwarded_client([b"198.51.100.1, 203.0.113.9, 10.1.2.3"], trusted) == "203.0.113.9"
    assert forwarded_client([b"10.0.0.1", b"10.0.0.2"], trusted) == "10.0.0.1"
    assert forwarded_client([], trusted) is None
    assert "127.0.0.2" in trusted and "127.0.0.1" not in trusted and "junk" not in trusted


def test_a_refusal_is_a_complete_answer_in_openais_error_shape_with_retry_after():
    raw = refusal_bytes("server_connection_limit")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["retry-after"] == "1" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)["error"]
    assert error["code"] == "server_connection_limit" and error["type"] == "service_unavailable"
    assert set(error) == {"message", "type", "param", "code"}
    assert refusal_bytes("header_timeout").startswith(b"HTTP/1.1 408 ")


def test_past_the_ceiling_the_oldest_connection_that_sent_nothing_gives_way():
    guard = _guard(total=2, per_client=2, overflow=2)
    conns = [_Conn(guard, "10.0.0.1") for _ in range(4)]
    for conn in conns:
        guard.opened(conn)
    guard.heard_from(conns[0])  # its request is being read: never closed for another
    conns[1].pending = 120  # its request waits in the kernel buffer: not closed either
    newcomer = _Conn(guard, "10.0.0.1")
    assert guard.opened(newcomer) is Admission.OVERFLOW
    assert [c.transport.closed for c in conns] == [False, False, True, False]
    for conn in [*conns, newcomer]:
        conn.pending = 1
    last = _Conn(guard, "10.0.0.1")
    assert guard.opened(last) is Admission.OVER_CEILING  # nothing silent: answered at once
