"""Overload from one address (issue 38): every request the server does not serve gets a complete
HTTP answer (429 or 503, Retry-After, OpenAI's error shape), never a closed or reset connection.

1,500 and then 3,000 concurrent streamed completions from 127.0.0.1 against a server with its
defaults (64 running slots, 256 queued, 2,048 connections): the queue cap answers 429, the
connection cap 503 after reading the head. Nothing here depends on the machine's speed: the
assertions are about how each request ended, whatever the mix of statuses.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import httpx
import pytest
from conftest import ServerProcess, launch
from server_testlib import metric, wait_until

from benchmarks.overload_client import (
    counts,
    flood,
    raise_open_file_limit,
    request_bytes,
    send_one,
)

MARGIN_SECONDS = 120.0
# Long enough that the running slots stay taken while the burst arrives; short enough for CI.
BODY = {"prompt": "hi", "max_tokens": 48, "ignore_eos": True, "stream": True}
FILES_NEEDED = 3_000 + 512  # the client's sockets; the server raises its own limit


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if raise_open_file_limit(8_192) < FILES_NEEDED:
        pytest.skip(f"the open-file hard limit is below the {FILES_NEEDED} sockets this needs")
    server = launch("defaults", ["--device", "cpu"], tmp_path_factory.mktemp("defaults"))
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    args = ["--device", "cpu", "--max-connections", "8", "--max-connections-per-client", "2",
            "--trusted-proxies", "127.0.0.2", "--max-num-seqs", "8"]  # fmt: skip
    server = launch("capped", args, tmp_path_factory.mktemp("capped"))
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def _engine_idle(server: ServerProcess) -> bool:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return metric(text, "batchgate_kv_blocks_used") == 0 and all(
        metric(text, name, priority=p) == 0
        for name in ("batchgate_num_requests_running", "batchgate_num_requests_waiting")
        for p in ("interactive", "batch")
    )


@pytest.mark.slow
@pytest.mark.parametrize("count", [1_500, 3_000])
def test_a_burst_from_one_address_is_served_or_refused_with_a_readable_answer(defaults, count):
    assert defaults.port is not None
    request = request_bytes("127.0.0.1", defaults.port, "/v1/completions", BODY)
    outcomes = asyncio.run(flood("127.0.0.1", defaults.port, request, count))
    by_status = counts(outcomes)
    print(f"{count} concurrent requests: {by_status}")
    assert set(by_status) <= {"200", "429", "503"}, by_status
    assert by_status.get("200", 0) > 0, by_status
    for outcome in outcomes:
        if outcome.status in (429, 503):
            assert outcome.retry_after is not None, outcome
            assert outcome.code in ("queue_full", "server_connection_limit"), outcome
    assert wait_until(lambda: _engine_idle(defaults), timeout_seconds=MARGIN_SECONDS)
    assert httpx.get(f"{defaults.base_url}/health", timeout=30).status_code == 200


def _hold_request(port: int, source: str, headers: str = "") -> socket.socket:
    """A request in progress for as long as the test needs, whatever the machine's speed: its
    head is complete and read (the server asked for the body: 100 Continue), its body never
    comes (the server waits --body-read-timeout-seconds, 30 s)."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\n%bContent-Length: 100\r\n\r\n" % headers.encode()
    )
    sock.settimeout(MARGIN_SECONDS)
    assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
    return sock


def _post(port: int, body: dict, *, source: str = "127.0.0.1", headers: str = ""):
    async def go():
        import json

        payload = json.dumps(body).encode()
        request = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{headers}Content-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
        return await send_one("127.0.0.1", port, request, source=source)

    return asyncio.run(go())


def test_over_the_per_client_cap_a_request_with_a_large_body_reads_its_503(capped):
    assert capped.port is not None
    held = [_hold_request(capped.port, "127.0.0.1") for _ in range(2)]
    try:
        # 200 KB of prompt still being sent when the refusal is written: read, not reset.
        big = {"prompt": "x" * 200_000, "max_tokens": 1}
        refused = _post(capped.port, big)
        assert refused.status == 503 and refused.code == "client_connection_limit", refused
        assert refused.retry_after == "1"
        # Another address is under its own cap; /health is served on an overflow connection.
        other = _post(capped.port, {"prompt": "hi", "max_tokens": 2}, source="127.0.0.3")
        assert other.status == 200, other
        assert httpx.get(f"{capped.base_url}/health", timeout=30).status_code == 200
        text = httpx.get(f"{capped.base_url}/metrics", timeout=30).text
        rejected = "batchgate_requests_rejected_total"
        assert metric(text, rejected, reason="client_connection_limit") >= 1
    finally:
        for sock in held:
            sock.close()
    assert wait_until(lambda: _engine_idle(capped), timeout_seconds=MARGIN_SECONDS)


def test_behind_a_trusted_proxy_the_cap_counts_the_forwarded_clients_requests(capped):
    assert capped.port is not None
    xff = "X-Forwarded-For: 203.0.113.9\r\n"
    held = [_hold_request(capped.port, "127.0.0.2", xff) for _ in range(2)]
    try:
        # The proxy's third connection is not refused for its own address: the cap is the
        # forwarded client's, so 203.0.113.9's third request is refused and another's served.
        refused = _post(capped.port, {"prompt": "hi", "max_tokens": 2}, source="127.0.0.2",
                        headers=xff)  # fmt: skip
        assert refused.status == 503 and refused.code == "client_request_limit", refused
        other = _post(capped.port, {"prompt": "hi", "max_tokens": 2}, source="127.0.0.2",
                      headers="X-Forwarded-For: 198.51.100.7\r\n")  # fmt: skip
        assert other.status == 200, other
    finally:
        for sock in held:
            sock.close()
    assert wait_until(lambda: _engine_idle(capped), timeout_seconds=MARGIN_SECONDS)


def test_a_burst_while_draining_is_answered_503_draining(tmp_path):
    """SIGTERM with a long stream in flight: the drain lasts while it streams, and a burst
    sent meanwhile is answered (503 `draining`, Retry-After), none of it cut."""
    args = ["--device", "cpu", "--max-model-len", "4096", "--max-tokens-cap", "4000",
            "--drain-timeout-seconds", "60"]  # fmt: skip
    server = launch("draining", args, tmp_path).wait_ready()
    try:
        assert server.port is not None
        held = _post_stream_started(server.port)
        server.terminate()
        assert wait_until(
            lambda: httpx.get(f"{server.base_url}/health", timeout=30).status_code == 503,
            timeout_seconds=MARGIN_SECONDS,
        )
        request = request_bytes("127.0.0.1", server.port, "/v1/completions", BODY)
        outcomes = asyncio.run(flood("127.0.0.1", server.port, request, 200))
        assert counts(outcomes) == {"503": 200}, counts(outcomes)
        assert all(o.code == "draining" and o.retry_after for o in outcomes)
        held.close()  # the drain ends with the last stream; the server exits 0
        assert server.process.wait(timeout=MARGIN_SECONDS) == 0, server.log()
    finally:
        server.stop()


def _post_stream_started(port: int) -> socket.socket:
    """A 3,900-token stream whose first bytes have arrived (it keeps the drain open)."""
    body = b'{"prompt": "hold", "max_tokens": 3900, "ignore_eos": true, "stream": true}'
    sock = socket.socket()
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    sock.settimeout(MARGIN_SECONDS)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock
