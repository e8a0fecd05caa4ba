"""The connection guard, the fairness rule and the new settings, without a server."""

from __future__ import annotations

import asyncio

import pytest

from reference_server.api.auth import is_loopback_host_header
from reference_server.api.connections import ConnectionGuard, ConnectionLimits
from reference_server.api.errors import APIError
from reference_server.api.fairness import ClientShares
from reference_server.api.server_config import ServerConfig, ServerConfigError


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Conn:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.transport = _Transport()


def _guard(total: int, per_client: int) -> ConnectionGuard:
    return ConnectionGuard(
        ConnectionLimits(max_connections=total, max_connections_per_client=per_client,
                         header_timeout_seconds=1.0, max_header_bytes=4096, max_header_count=50)
    )  # fmt: skip


def test_a_new_connection_over_a_cap_closes_the_longest_idle_one_first():
    guard = _guard(total=10, per_client=2)
    a, b = _Conn("1.1.1.1"), _Conn("1.1.1.1")
    assert guard.opened(a) and guard.opened(b)
    guard.set_idle(a, False)  # a is busy: b is the one that gives way
    c = _Conn("1.1.1.1")
    assert guard.opened(c)
    assert b.transport.closed and not a.transport.closed
    assert not guard.over_limit(c)


def test_busy_connections_over_the_cap_are_over_the_limit_and_the_reserve_is_bounded():
    guard = _guard(total=2, per_client=2)
    conns = [_Conn(f"10.0.0.{i}") for i in range(40)]
    results = []
    for conn in conns:
        results.append(guard.opened(conn))
        guard.set_idle(conn, False)  # each one starts a request at once
    assert all(results[:34]) and not any(results[34:])  # cap 2 + a reserve of 32
    assert guard.over_limit(conns[2])


def _shares(capacity: int, ratio: float | None = None) -> ClientShares:
    return ClientShares(enabled=True, share_ratio=ratio, capacity_fn=lambda: capacity)


def test_a_client_alone_may_use_the_whole_server():
    async def run() -> None:
        shares = _shares(capacity=2)
        tickets = [shares.admit("addr:a") for _ in range(50)]
        assert len(tickets) == 50

    asyncio.run(run())


def test_under_contention_a_newcomer_sheds_queued_requests_and_an_over_share_client_waits():
    async def run() -> None:
        shares = _shares(capacity=4)
        a = [shares.admit("addr:a") for _ in range(10)]
        for ticket in a[:4]:
            ticket.started = True  # streaming: never shed
        b = shares.admit("addr:b")
        shed = [t for t in a if t.shed.done()]
        # Only queued requests go: the 4 streaming ones stay, though over the share (4 / 2).
        assert len(shed) == 6 and not any(t.started for t in shed)
        assert {id(t) for t in b.to_settle} == {id(t) for t in shed}
        with pytest.raises(APIError) as refused:
            shares.admit("addr:a")
        assert refused.value.status_code == 429
        assert refused.value.headers["Retry-After"] == "1"

    asyncio.run(run())


def test_no_contention_while_running_slots_are_free():
    async def run() -> None:
        shares = _shares(capacity=8, ratio=0.25)
        for _ in range(3):
            shares.admit("addr:a")
        shares.admit("addr:b")
        assert shares.num_shed == 0 and shares.num_refused == 0

    asyncio.run(run())


@pytest.mark.parametrize(
    "host, loopback",
    [("127.0.0.1:8000", True), ("localhost", True), ("[::1]:80", True), ("127.9.9.9", True),
     ("attacker.example", False), ("127.0.0.1.attacker.example", False), ("", False),
     ("localhost.attacker.example", False), ("0.0.0.0:80", False)],
)  # fmt: skip
def test_only_host_headers_naming_the_loopback_interface_pass(host, loopback):
    assert is_loopback_host_header(host) is loopback


@pytest.mark.parametrize(
    "settings, field",
    [({"trusted_proxies": "*"}, "trusted_proxies"),
     ({"max_connections_per_client": 5000}, "max_connections_per_client"),
     ({"client_share_ratio": 1.5}, "client_share_ratio"),
     ({"header_timeout_seconds": 0}, "header_timeout_seconds"),
     ({"max_header_bytes": 10}, "max_header_bytes"),
     ({"max_header_count": 0}, "max_header_count"),
     ({"stream_stall_timeout_seconds": -1}, "stream_stall_timeout_seconds"),
     ({"client_fairness": "yes"}, "client_fairness")],
)  # fmt: skip
def test_bad_connection_settings_are_refused_naming_the_field(settings, field):
    with pytest.raises(ServerConfigError) as error:
        ServerConfig(**settings)
    assert error.value.field == field


def test_the_per_client_cap_defaults_to_half_the_connections():
    assert ServerConfig(max_connections=100).client_connection_cap == 50
    assert ServerConfig(trusted_proxies="127.0.0.1, 10.0.0.0/8").trusted_proxies
