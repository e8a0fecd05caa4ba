"""Hostile and careless clients against the reference server (issue 15), on loopback only.

Run: .venv/bin/python -m benchmarks.bench_hostile_clients [--repo DIR] [--idle 2048] [--stalled 100]
(--repo: the checkout whose server to start, e.g. a `git worktree` of the old code, to measure
before/after with the same probes.) Each probe starts its own server on 127.0.0.1, port 0:

1. idle: hold N plain TCP connections; /health status and latency while held; are they
   closed within --wait s? Slowloris: 20 connections sending one header byte a second.
2. heads: one unterminated 128 MB header line (server RSS growth, /health worst latency,
   bytes the server took before closing), a 16 MB header, 100,000 headers.
5. mid-body: 20 POSTs that send half their body and hang up: ERROR / Traceback log lines.
6. stalled streams: S streams (client 127.0.0.1, 2 KB receive buffer) that never read; then
   a 4-token request from 127.0.0.2: its status and time; running requests --wait s later.
7. admin: PUT /admin/batching with Host: attacker.example and text/plain; GET with
   X-Forwarded-For from a server started with FORWARDED_ALLOW_IPS=*.
Prints a table; writes benchmarks/results/hostile_clients.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import REPO_ROOT, RESULTS_DIR, Server, print_table, write_result


def start_server(repo: Path, args: list[str], env: dict[str, str] | None = None) -> Server:
    """`repo`'s bundled server on CPU (info log: probe 5 counts its lines), started and ready."""
    return Server.bundled(
        "--device", "cpu", "--log-level", "info", *args, cwd=repo,
        env={"OMP_NUM_THREADS": "1", **(env or {})},
        start_timeout_seconds=120, stop_timeout_seconds=40,
    ).start()  # fmt: skip


def supports(repo: Path, flag: str) -> bool:
    text = subprocess.run([sys.executable, "-m", "reference_server", "--help"], cwd=repo,
                          capture_output=True, text=True).stdout  # fmt: skip
    return flag in text


def health(url: str, timeout: float = 30.0) -> tuple[int | str, float]:
    started = time.monotonic()
    try:
        status: int | str = httpx.get(url + "/health", timeout=timeout).status_code
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, time.monotonic() - started


def closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""  # a 408 body then EOF reads as not-yet-closed once
    except BlockingIOError:
        return False
    except OSError:
        return True


def count_closed(socks: list[socket.socket]) -> int:
    n = 0
    for s in socks:
        if closed(s) or closed(s):
            n += 1
    return n


def probe_idle(repo: Path, n: int, wait: float) -> dict[str, Any]:
    server = start_server(repo, [])
    try:
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(n)]
        time.sleep(0.5)
        statuses = [health(server.url) for _ in range(5)]
        slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
        for s in slow:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        while time.monotonic() - started < wait:
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"X")
            time.sleep(1.0)
        result = {
            "idle_sockets": n,
            "health_while_held": [s for s, _ in statuses],
            "health_max_seconds": round(max(t for _, t in statuses), 3),
            "idle_closed_after_wait": count_closed(socks),
            "slowloris_closed_after_wait": count_closed(slow),
            "wait_seconds": wait,
        }
        for s in socks + slow:
            s.close()
        return result
    finally:
        server.stop()


def probe_heads(repo: Path) -> dict[str, Any]:
    server = start_server(repo, [])
    try:
        rss0 = server.rss_bytes()
        worst = [0.0]
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                worst[0] = max(worst[0], health(server.url)[1])
                time.sleep(0.1)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent, chunk, peak = 0, b"a" * 1_048_576, rss0
        with contextlib.suppress(OSError):
            while sent < 128 * 1_048_576:
                sock.sendall(chunk)
                sent += len(chunk)
                peak = max(peak, server.rss_bytes())
        peak = max(peak, server.rss_bytes())
        sock.close()
        time.sleep(0.5)
        stop.set()
        poller.join()

        def status_of(head: bytes) -> int | str:
            with socket.create_connection(("127.0.0.1", server.port)) as s:
                with contextlib.suppress(OSError):
                    s.sendall(head)
                s.settimeout(30)
                try:
                    line = s.recv(200).split(b"\r\n", 1)[0]
                except OSError as exc:
                    return type(exc).__name__
                return int(line.split()[1]) if line else "closed"

        big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 16_777_216 + b"\r\n\r\n"
        many = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 100_000 + b"\r\n"
        return {
            "unterminated_128mb_rss_growth_mb": round((peak - rss0) / 1e6, 1),
            "unterminated_128mb_bytes_taken_mb": round(sent / 1e6, 1),
            "health_worst_seconds_during": round(worst[0], 3),
            "header_16mb_status": status_of(big),
            "headers_100000_status": status_of(many),
        }
    finally:
        server.stop()


def probe_mid_body(repo: Path, n: int = 20) -> dict[str, Any]:
    server = start_server(repo, [])
    try:
        before = len(server.log_text())
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", server.port)) as s:
                s.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                    b'application/json\r\nContent-Length: 1000\r\n\r\n{"prompt": '
                )
                time.sleep(0.1)
        time.sleep(1.0)
        text = server.log_text()[before:]
        return {
            "requests": n,
            "error_lines": sum(" ERROR " in line for line in text.splitlines()),
            "traceback_lines": text.count("Traceback"),
            "log_bytes_per_request": round(len(text) / n),
        }
    finally:
        server.stop()


def probe_stalled(repo: Path, n: int, wait: float) -> dict[str, Any]:
    args = ["--max-model-len", "4096", "--max-tokens-cap", "4000"]
    if supports(repo, "--stream-stall-timeout-seconds"):
        args += ["--stream-stall-timeout-seconds", "5"]
    server = start_server(repo, args)
    body = json.dumps({"prompt": "hi", "max_tokens": 4000, "ignore_eos": True, "stream": True,
                       "priority": "interactive"}).encode()  # fmt: skip
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            s.connect(("127.0.0.1", server.port))
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            socks.append(s)
        time.sleep(3.0)
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        started = time.monotonic()
        with httpx.Client(transport=transport, timeout=300) as other:
            answer = other.post(
                server.url + "/v1/completions",
                json={"prompt": "hi", "max_tokens": 4, "ignore_eos": True},
            )
        other_seconds = time.monotonic() - started
        time.sleep(wait)
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
        running = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                      if line.startswith("batchgate_num_requests_running"))  # fmt: skip
        return {
            "stalled_streams": n,
            "other_client_status": answer.status_code,
            "other_client_seconds": round(other_seconds, 2),
            "running_after_wait": int(running),
            "wait_seconds": wait,
        }
    finally:
        for s in socks:
            s.close()
        server.stop()


def probe_admin(repo: Path) -> dict[str, Any]:
    server = start_server(repo, [], env={"FORWARDED_ALLOW_IPS": "*"})
    try:
        rebound = httpx.put(
            server.url + "/admin/batching",
            content=b'{"max_num_seqs": 8}',
            headers={"Host": "attacker.example", "Content-Type": "text/plain"},
        )
        forwarded = httpx.get(server.url + "/admin/batching",
                              headers={"X-Forwarded-For": "203.0.113.9"})  # fmt: skip
        return {
            "rebinding_put_status": rebound.status_code,
            # 403 = the header was believed (the peer became 203.0.113.9); 200 = ignored.
            "x_forwarded_for_believed": forwarded.status_code == 403,
        }
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO_ROOT)
    parser.add_argument("--idle", type=int, default=2048)
    parser.add_argument("--stalled", type=int, default=100)
    parser.add_argument("--wait", type=float, default=15.0)
    parser.add_argument("--only", default="1,2,5,6,7")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "hostile_clients.json")
    args = parser.parse_args()
    repo = args.repo.resolve()
    only = set(args.only.split(","))
    results: dict[str, Any] = {"repo": str(repo)}
    probes = {
        "1": lambda: probe_idle(repo, args.idle, args.wait),
        "2": lambda: probe_heads(repo),
        "5": lambda: probe_mid_body(repo),
        "6": lambda: probe_stalled(repo, args.stalled, args.wait),
        "7": lambda: probe_admin(repo),
    }
    for name, probe in probes.items():
        if name in only:
            results[name] = probe()
            print(f"probe {name}: {json.dumps(results[name])}", flush=True)
    print()
    print_table(
        ("probe", "measure", "value"),
        ((name, key, value) for name in sorted(k for k in results if k != "repo")
         for key, value in results[name].items()),
    )  # fmt: skip
    write_result(args.out, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
