"""The connection guard's edges (connection_guard.py), no server: trusted-proxy parsing, the
per-client and total caps counted separately, idle bookkeeping, the silent-connection scan and
refusal counting."""

from __future__ import annotations

import pytest

from reference_server.api import connection_guard as cg
from reference_server.api.connection_guard import (
    Admission,
    ConnectionGuard,
    ConnectionLimits,
    TrustedProxies,
    forwarded_client,
)


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
        self.pending = 0

    def pending_input(self) -> int:
        return self.pending


def _guard(total: int, per_client: int, overflow: int = 0, proxies: str | None = None, **kw):
    limits = ConnectionLimits(
        max_connections=total, max_connections_per_client=per_client, header_timeout_seconds=1.0,
        max_header_bytes=4096, max_header_count=50, overflow_connections=overflow,
    )  # fmt: skip
    return ConnectionGuard(limits, trusted=TrustedProxies(proxies), **kw)


def test_trusted_proxies_parse_addresses_networks_and_blanks() -> None:
    assert not TrustedProxies(None) and not TrustedProxies("") and not TrustedProxies(" , ")
    trusted = TrustedProxies(" 10.1.2.3/8 ,, ::1 ")  # host bits set: not strict
    assert trusted
    assert "10.200.0.1" in trusted and " 10.0.0.9 " in trusted
    assert "[::1]" in trusted and "::1" in trusted and "::2" not in trusted
    assert "11.0.0.1" not in trusted
    assert None not in trusted and 10 not in trusted
    assert "10.0.0.1" not in TrustedProxies(None)


def test_forwarded_client_skips_blank_entries_and_reads_every_header() -> None:
    trusted = TrustedProxies("10.0.0.0/8")
    assert forwarded_client([b" , ", b""], trusted) is None
    assert forwarded_client([b"203.0.113.1,", b" 10.0.0.5 , "], trusted) == "203.0.113.1"
    assert forwarded_client([b"198.51.100.2", b"203.0.113.1"], TrustedProxies(None)) == (
        "203.0.113.1"
    )
    assert forwarded_client([b"caf\xe9"], trusted) == "caf\u00e9"  # latin-1, never an error


def test_the_overflow_allowance() -> None:
    assert _guard(total=4, per_client=4, overflow=3).limits.overflow_allowance == 3
    assert _guard(total=32, per_client=4).limits.overflow_allowance == 32
    assert _guard(total=33, per_client=4).limits.overflow_allowance == 33
    assert _guard(total=31, per_client=4).limits.overflow_allowance == 32


def test_the_per_client_cap_is_counted_per_client_and_the_total_over_all() -> None:
    guard = _guard(total=3, per_client=2)
    a1, a2, a3 = (_Conn(guard, "1.1.1.1") for _ in range(3))
    b1 = _Conn(guard, "2.2.2.2")
    assert guard.opened(a1) is Admission.ADMITTED
    assert guard.opened(a2) is Admission.ADMITTED
    assert guard.opened(a3) is Admission.OVERFLOW  # its client's cap, not the total
    assert guard.opened(b1) is Admission.ADMITTED  # another client: room under the total
    b2 = _Conn(guard, "2.2.2.2")
    assert guard.opened(b2) is Admission.OVERFLOW  # the total
    assert guard.admitted_by_client == {"1.1.1.1": {a1: None, a2: None}, "2.2.2.2": {b1: None}}
    guard.closed(b1)
    assert "2.2.2.2" not in guard.admitted_by_client
    assert guard.admit_late(b2) and guard.is_admitted(b2)
    assert not guard.admit_late(a3)  # its client is still at its cap
    guard.closed(a3)
    assert not guard.admit_late(a3)  # closed: never admitted afterwards
    assert guard.admit_late(a1)  # already admitted


def test_an_idle_connection_of_another_client_gives_way_only_to_the_total_cap() -> None:
    guard = _guard(total=2, per_client=2)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "2.2.2.2")
    guard.opened(a), guard.opened(b)
    guard.set_idle(a, True)
    c = _Conn(guard, "2.2.2.2")
    assert guard.opened(c) is Admission.ADMITTED  # total cap: the longest-idle of all gives way
    assert a.transport.closed and guard.num_evicted == 1
    assert guard.idle == {} and guard.idle_by_client == {}


def test_the_longest_idle_gives_way_first() -> None:
    guard = _guard(total=3, per_client=3)
    conns = [_Conn(guard, "1.1.1.1") for _ in range(3)]
    for conn in conns:
        guard.opened(conn)
    guard.set_idle(conns[2], True)
    guard.set_idle(conns[0], True)
    guard.opened(_Conn(guard, "1.1.1.1"))
    assert [c.transport.closed for c in conns] == [False, False, True]


def test_idle_bookkeeping() -> None:
    guard = _guard(total=4, per_client=4, proxies="127.0.0.2")
    a, proxy = _Conn(guard, "1.1.1.1"), _Conn(guard, "127.0.0.2")
    overflow_guard = _guard(total=0, per_client=0)
    stranger = _Conn(overflow_guard, "1.1.1.1")
    assert overflow_guard.opened(stranger) is Admission.OVERFLOW
    overflow_guard.set_idle(stranger, True)  # not admitted: never idle
    assert overflow_guard.idle == {} and overflow_guard.idle_by_client == {}
    guard.opened(a), guard.opened(proxy)
    guard.set_idle(a, True), guard.set_idle(proxy, True)
    assert list(guard.idle) == [a, proxy] and guard.idle_by_client == {"1.1.1.1": {a: None}}
    guard.set_idle(a, False)
    assert list(guard.idle) == [proxy] and guard.idle_by_client == {}
    guard.set_idle(a, False)  # twice: nothing to undo
    guard.set_idle(proxy, False)
    assert guard.idle == {}
    guard.closed(a), guard.closed(proxy)
    assert guard.open == {} and guard.admitted == {} and guard.admitted_by_client == {}
    guard.closed(a)  # a second connection_lost is ignored
    assert guard.open == {}


def test_two_idle_connections_of_one_client_leave_one_behind() -> None:
    guard = _guard(total=4, per_client=4)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    guard.opened(a), guard.opened(b)
    guard.set_idle(a, True), guard.set_idle(b, True)
    guard.set_idle(a, False)
    assert guard.idle_by_client == {"1.1.1.1": {b: None}}


def test_releasing_a_forwarded_hold() -> None:
    guard = _guard(total=10, per_client=3, proxies="127.0.0.2")
    conns = [_Conn(guard, "127.0.0.2") for _ in range(3)]
    for conn in conns:
        guard.opened(conn)
        conn.forwarded = None
        assert guard.hold_forwarded(conn, "203.0.113.9")
    assert guard.forwarded_busy == {"203.0.113.9": 3}
    assert guard.hold_forwarded(conns[0], "203.0.113.9")  # pipelined: replaces its own hold
    assert guard.forwarded_busy == {"203.0.113.9": 3} and conns[0].forwarded == "203.0.113.9"
    guard.release_forwarded(conns[0])
    assert guard.forwarded_busy == {"203.0.113.9": 2} and conns[0].forwarded is None
    guard.release_forwarded(conns[0])  # nothing held: nothing released
    assert guard.forwarded_busy == {"203.0.113.9": 2}
    guard.release_forwarded(conns[1]), guard.release_forwarded(conns[2])
    assert guard.forwarded_busy == {}


def test_refusals_are_counted_and_reported() -> None:
    seen: list[str] = []
    guard = _guard(total=1, per_client=1, on_refusal=seen.append)
    guard.refused("server_connection_limit")
    guard.refused("header_timeout")
    assert guard.num_refused == 2 and seen == ["server_connection_limit", "header_timeout"]
    quiet = _guard(total=1, per_client=1)
    quiet.refused("x")
    assert quiet.num_refused == 1


def test_a_silent_connection_gives_way_and_the_newcomer_is_then_admitted_or_overflow() -> None:
    guard = _guard(total=1, per_client=1, overflow=1)
    first, second = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    assert guard.opened(first) is Admission.ADMITTED
    assert guard.opened(second) is Admission.OVERFLOW
    guard.heard_from(second)
    third = _Conn(guard, "1.1.1.1")
    # Over the ceiling, `first` (admitted, silent) gives way; then third takes its place.
    assert guard.opened(third) is Admission.ADMITTED
    assert first.transport.closed and guard.num_evicted == 1
    assert guard.is_admitted(third) and not guard.is_admitted(first)
    assert list(guard.silent) == [third]


def test_the_newcomer_itself_is_never_the_silent_one_that_gives_way() -> None:
    guard = _guard(total=1, per_client=1, overflow=1)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    guard.opened(a), guard.opened(b)
    guard.heard_from(a), guard.heard_from(b)
    c = _Conn(guard, "1.1.1.1")
    assert guard.opened(c) is Admission.OVER_CEILING
    assert not c.transport.closed and guard.num_evicted == 0


def test_the_silent_scan_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the oldest _SILENT_SCAN silent connections are looked at (one ioctl each): a burst's
    # newest ones have their bytes on the way.
    monkeypatch.setattr(cg, "_SILENT_SCAN", 2)
    guard = _guard(total=1, per_client=5, overflow=2)
    conns = [_Conn(guard, "1.1.1.1") for _ in range(3)]
    for conn in conns:
        guard.opened(conn)
        conn.pending = 5
    conns[2].pending = 0  # silent, but third in line
    newcomer = _Conn(guard, "1.1.1.1")
    assert guard.opened(newcomer) is Admission.OVER_CEILING
    assert not conns[2].transport.closed
    guard.closed(newcomer)  # answered 503 at once and closed, as the server does
    monkeypatch.setattr(cg, "_SILENT_SCAN", 3)
    late = _Conn(guard, "1.1.1.1")
    late.pending = 5
    assert guard.opened(late) is Admission.OVERFLOW
    assert conns[2].transport.closed


def test_the_default_silent_scan_looks_at_64() -> None:
    assert cg._SILENT_SCAN == 64


def test_past_the_ceiling_silent_connections_give_way_until_the_newcomer_has_a_place() -> None:
    # The oldest silent connection is an admitted one of another client: closing it frees no
    # overflow place for a newcomer whose own client is at its cap. The next silent one (an
    # overflow connection) then gives way too, and the newcomer is overflow: never refused
    # 503 at once while a silent connection was closed for it and a place is free.
    guard = _guard(total=10, per_client=1, overflow=2)
    silent_admitted = _Conn(guard, "2.2.2.2")
    assert guard.opened(silent_admitted) is Admission.ADMITTED
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    assert guard.opened(a) is Admission.ADMITTED
    assert guard.opened(b) is Admission.OVERFLOW
    guard.heard_from(a), guard.heard_from(b)
    silent_overflow = _Conn(guard, "1.1.1.1")
    assert guard.opened(silent_overflow) is Admission.OVERFLOW
    newcomer = _Conn(guard, "1.1.1.1")
    assert guard.opened(newcomer) is Admission.OVERFLOW
    assert silent_admitted.transport.closed and silent_overflow.transport.closed
    assert guard.num_evicted == 2
    assert len(guard.open) - len(guard.admitted) == 2  # b and the newcomer


def test_closing_a_connection_that_has_spoken_and_counting_each_eviction() -> None:
    guard = _guard(total=2, per_client=2)
    a, b = _Conn(guard, "1.1.1.1"), _Conn(guard, "1.1.1.1")
    guard.opened(a), guard.opened(b)
    guard.heard_from(a)  # no longer silent
    guard.heard_from(a)  # twice: nothing to do
    guard.closed(a)
    assert a not in guard.open and list(guard.silent) == [b]
    guard = _guard(total=1, per_client=1)
    b = _Conn(guard, "1.1.1.1")
    guard.opened(b)
    for _ in range(2):  # two idle connections give way, one at a time
        guard.set_idle(b, True)
        newcomer = _Conn(guard, "1.1.1.1")
        guard.opened(newcomer)
        guard.heard_from(newcomer)
        b = newcomer
    assert guard.num_evicted == 2


def test_a_malformed_host_is_never_trusted() -> None:
    trusted = TrustedProxies("127.0.0.2")
    assert "X127.0.0.2" not in trusted and "127.0.0.2X" not in trusted
    assert "[127.0.0.2]" in trusted
