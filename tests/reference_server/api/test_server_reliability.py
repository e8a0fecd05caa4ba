"""Hostile and careless clients (issue 15): each probe of benchmarks/bench_hostile_clients.py,
bounded in count and time, on loopback only, against one server with small limits.

Timeouts are configured small and every wait is a bounded poll with a generous margin, so the
answers are the same on an idle machine and on one with a busy core.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import ServerProcess, launch
from server_testlib import metric, wait_until

HEADER_TIMEOUT_SECONDS = 1.5
STALL_TIMEOUT_SECONDS = 2.0
# Generous: a busy core may delay a timer callback by seconds, never by a minute.
MARGIN_SECONDS = 30.0
ARGS = [
    "--device", "cpu", "--max-model-len", "4096", "--max-tokens-cap", "4000",
    "--log-level", "info", "--header-timeout-seconds", str(HEADER_TIMEOUT_SECONDS),
    "--keep-alive-timeout-seconds", "1", "--max-connections", "200",
    "--max-connections-per-client", "100", "--max-header-bytes", "8192",
    "--max-header-count", "50", "--stream-stall-timeout-seconds", str(STALL_TIMEOUT_SECONDS),
    "--max-num-seqs", "4", "--trusted-proxies", "127.0.0.2",
]  # fmt: skip


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # uvicorn would trust X-Forwarded-For from everyone with this; the server must not.
    previous = os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["FORWARDED_ALLOW_IPS"] = "*"
    try:
        server = launch("hardened", ARGS, tmp_path_factory.mktemp("hardened"))
    finally:
        if previous is None:
            del os.environ["FORWARDED_ALLOW_IPS"]
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = previous
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def _connect(server: ServerProcess, *, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    return sock


def _read_until_closed(sock: socket.socket, timeout_seconds: float) -> bytes | None:
    """Everything the server sent before closing; None if it is still open at the deadline."""
    sock.settimeout(timeout_seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return None
    except OSError:
        pass  # reset: closed too
    return data


def _status(raw: bytes) -> int:
    return int(raw.split(b"\r\n", 1)[0].split()[1])


def test_idle_sockets_never_lock_out_health_and_are_closed_after_the_head_timeout(hardened):
    # 300 > the per-client cap (100) and the total cap (200): the extra ones are kept to be
    # answered once they send a head; past that allowance the oldest silent ones give way.
    socks = [_connect(hardened) for _ in range(300)]
    try:
        with httpx.Client(base_url=hardened.base_url, timeout=30) as client:
            for _ in range(3):
                assert client.get("/health").status_code == 200
            assert client.get("/metrics").status_code == 200
        deadline = time.monotonic() + HEADER_TIMEOUT_SECONDS + MARGIN_SECONDS
        for sock in socks:
            assert _read_until_closed(sock, max(0.1, deadline - time.monotonic())) == b""
    finally:
        for sock in socks:
            sock.close()


def test_a_slowloris_head_is_answered_408_and_closed(hardened):
    sock = _connect(hardened)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed_at = None
        deadline = time.monotonic() + HEADER_TIMEOUT_SECONDS + MARGIN_SECONDS
        data = b""
        # One header byte every 0.2 s: never a complete head, always some progress.
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                sock.sendall(b"X")
            got = _read_until_closed(sock, 0.2)
            if got is not None:
                data, closed_at = got, time.monotonic()
                break
        assert closed_at is not None, "slowloris connection still open"
        assert _status(data) == 408
    finally:
        sock.close()


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
    ],
    ids=["64KiB-header", "200-headers"],
)
def test_a_head_over_the_limits_is_refused_431(hardened, head):
    sock = _connect(hardened)
    try:
        with contextlib.suppress(OSError):
            sock.sendall(head)
        data = _read_until_closed(sock, MARGIN_SECONDS)
        assert data is not None and _status(data) == 431
    finally:
        sock.close()


def test_an_unterminated_header_line_is_cut_off_early(hardened):
    sock = _connect(hardened)
    sent = 0
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        chunk = b"a" * 65536
        with contextlib.suppress(OSError):
            sock.settimeout(MARGIN_SECONDS)
            while sent < 64 * 1_048_576:
                sock.sendall(chunk)
                sent += len(chunk)
        # The server answered 431 and closed long before 64 MiB: the line was never buffered.
        assert sent < 16 * 1_048_576
    finally:
        sock.close()
    with httpx.Client(base_url=hardened.base_url, timeout=30) as client:
        assert client.get("/health").status_code == 200


def test_clients_hanging_up_mid_body_log_one_info_line_each(hardened):
    log_before = len(hardened.log_path.read_bytes())
    for _ in range(5):
        with _connect(hardened) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b'application/json\r\nContent-Length: 1000\r\n\r\n{"prompt": '
            )
            time.sleep(0.1)

    def new_log() -> str:
        return hardened.log_path.read_bytes()[log_before:].decode(errors="replace")

    assert wait_until(
        lambda: new_log().count("while sending the body of POST /v1/completions") == 5,
        timeout_seconds=MARGIN_SECONDS,
    ), new_log()
    assert "Traceback" not in new_log()
    assert " ERROR " not in new_log()


def test_a_stream_whose_client_stops_reading_is_aborted_and_frees_its_slot(hardened):
    body = b'{"prompt": "hi", "max_tokens": 4000, "ignore_eos": true, "stream": true}'
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", hardened.port))
    log_before = len(hardened.log_path.read_bytes())
    try:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

        def aborted() -> bool:
            return "stopped reading" in hardened.log_path.read_bytes()[log_before:].decode()

        assert wait_until(aborted, timeout_seconds=120.0), hardened.log()
        with httpx.Client(base_url=hardened.base_url, timeout=30) as client:
            assert wait_until(
                lambda: metric(client.get("/metrics").text, "batchgate_kv_blocks_used") == 0,
                timeout_seconds=MARGIN_SECONDS,
            )
        assert _read_until_closed(sock, MARGIN_SECONDS) is not None  # reset, not left open
    finally:
        sock.close()


def test_one_client_cannot_keep_another_waiting_behind_its_queue(hardened):
    """Client A alone queues 10 requests on 4 slots (no 429: alone it may use everything);
    client B arrives: B is served, and A's newest queued requests are shed with 429."""
    statuses: list[tuple[int, str | None]] = []
    body = {"prompt": "hi", "max_tokens": 300, "ignore_eos": True}

    def send_a() -> None:
        with httpx.Client(base_url=hardened.base_url, timeout=300) as a:
            response = a.post("/v1/completions", json=body)
            code = response.json()["error"]["code"] if response.status_code != 200 else None
            statuses.append((response.status_code, code))

    threads = [threading.Thread(target=send_a) for _ in range(10)]
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=hardened.base_url, timeout=30) as client:
        waiting = lambda: metric(  # noqa: E731
            client.get("/metrics").text, "batchgate_num_requests_waiting", priority="interactive"
        )
        assert wait_until(lambda: waiting() >= 4, timeout_seconds=MARGIN_SECONDS)
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=hardened.base_url, timeout=300, transport=transport) as b:
        answer = b.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
    for thread in threads:
        thread.join(timeout=300)
    assert answer.status_code == 200
    shed = [s for s in statuses if s == (429, "client_over_share")]
    assert shed, statuses
    assert all(s[0] in (200, 429) for s in statuses), statuses


def test_admin_refuses_foreign_hosts_non_json_bodies_and_forwarded_addresses(hardened):
    with httpx.Client(base_url=hardened.base_url, timeout=30) as client:
        rebound = client.put(
            "/admin/batching",
            content=b'{"max_num_seqs": 4}',
            headers={"Host": "attacker.example", "Content-Type": "application/json"},
        )
        assert rebound.status_code == 403
        assert rebound.json()["error"]["code"] == "admin_forbidden_host"
        plain = client.put(
            "/admin/batching",
            content=b'{"max_num_seqs": 4}',
            headers={"Content-Type": "text/plain"},
        )
        assert plain.status_code == 415
        assert client.put("/admin/batching", json={"max_num_seqs": 4}).status_code == 200
        localhost = client.get("/admin/batching", headers={"Host": "localhost"})
        assert localhost.status_code == 200
        # FORWARDED_ALLOW_IPS=* is in the server's environment: the header is still ignored.
        forwarded = client.get("/admin/batching", headers={"X-Forwarded-For": "203.0.113.9"})
        assert forwarded.status_code == 200
    # Through the proxy --trusted-proxies names, a remote client is what it is: 403.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=hardened.base_url, timeout=30, transport=transport) as proxy:
        remote = proxy.get("/admin/batching", headers={"X-Forwarded-For": "203.0.113.9"})
        assert remote.status_code == 403
        assert remote.json()["error"]["code"] == "admin_forbidden"
