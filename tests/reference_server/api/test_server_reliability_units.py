"""The fairness rule and the new settings, without a server (the connection guard's units:
test_connection_guard_units.py)."""

from __future__ import annotations

import asyncio

import pytest

from reference_server.api.auth import is_loopback_host_header
from reference_server.api.errors import APIError
from reference_server.api.fairness import ClientShares
from reference_server.api.server_config import ServerConfig, ServerConfigError


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


def test_the_per_client_cap_defaults_to_all_the_connections():
    # One load-generator host opening 1,500+ streams is the main use (docs/server.md).
    assert (
        ServerConfig(max_connections=100, max_connections_per_client=10).client_connection_cap == 10
    )
    assert ServerConfig(max_connections=100).client_connection_cap == 100
    assert ServerConfig(trusted_proxies="127.0.0.1, 10.0.0.0/8").trusted_proxies
