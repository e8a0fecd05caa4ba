"""A liveness probe and a scraper in one small process: GETs /health and /metrics in turn, one
pair every `interval` seconds, and prints their latencies as JSON (`{"/health": [s, ...],
"/metrics": [...]}`). It stands for the kubelet and Prometheus beside a saturated server.

Protocol with the benchmark that starts it (bench_server.py, through `launch`, `start` and
`stop` here), so that nothing of its own start lands in a measured run: it imports, connects
and probes each path once, then prints `ready`; it records from the line `go` on stdin until
stdin closes, then prints the JSON. Its start used to fall inside the run it measured: half a
second of CPU (the benchmark's imports) taken from a server on a 2-core machine, and a first
probe that paid for the TCP connection.

Each probe is one GET over a keep-alive socket of its own making (`_Connection`): a few system
calls between the two clock reads and no client library. Through httpx the same probes read a
/health p99 of 7-14 ms beside a saturated server while a bare socket's, taken at the same time
against the same server, read 5 ms: most of the difference was the client's own CPU time on a
machine whose cores the server and the load share.

    python benchmarks/server_probe.py URL [--interval 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import selectors
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

PATHS = ("/health", "/metrics")
_TIMEOUT_SECONDS = 30.0
_MAX_HEAD_BYTES = 64 * 1024


class ProbeError(Exception):
    """A probe that did not get a complete 200 answer; the message says what came instead."""


class _Connection:
    """One keep-alive HTTP/1.1 connection for GETs whose answers carry a Content-Length."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)  # ValueError for a malformed URL
        if parts.scheme != "http" or not parts.hostname:
            raise ProbeError(f"not an http:// URL: {url!r}")
        self._address = (parts.hostname, parts.port or 80)
        self._host = parts.netloc.encode("ascii")
        self._prefix = parts.path.rstrip("/")  # as a base URL's path, before each probe's
        self._sock: socket.socket | None = None
        self._buffer = b""

    def open(self) -> None:
        """Connect, unless the connection is open and the server has not closed it while it
        was idle (a keep-alive or head timeout): call it before starting a probe's clock."""
        sock = self._sock
        if sock is not None:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return
            self.close()  # an idle connection has nothing to read but its end (or a reset)
        sock = self._sock = socket.create_connection(self._address, _TIMEOUT_SECONDS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def get(self, path: str) -> None:
        """GET `path` on the open connection (`open`); returns once its whole answer has
        arrived, raises unless it was a 200."""
        assert self._sock is not None, "open() first"
        target = (self._prefix + path).encode("ascii")
        self._sock.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, self._host))
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > _MAX_HEAD_BYTES:
                raise ProbeError(f"GET {path}: an answer head over {_MAX_HEAD_BYTES} bytes")
            self._receive(path)
        head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = status_line.split(" ", 2)
        if len(status) < 2 or status[1] != "200":
            raise ProbeError(f"GET {path} answered {status_line!r}")
        fields = dict(line.partition(":")[::2] for line in lines)
        headers = {name.strip().lower(): value.strip() for name, value in fields.items()}
        length = headers.get("content-length", "")
        if not (length.isascii() and length.isdigit()):
            raise ProbeError(f"GET {path}: an answer without a Content-Length ({status_line!r})")
        while len(self._buffer) < int(length):
            self._receive(path)
        self._buffer = self._buffer[int(length) :]
        if "close" in headers.get("connection", "").lower():
            self.close()  # the next probe connects again

    def _receive(self, path: str) -> None:
        assert self._sock is not None
        data = self._sock.recv(1 << 16)
        if not data:
            raise ProbeError(f"GET {path}: the server closed the connection mid-answer")
        self._buffer += data

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _read_line(fd: int) -> bytes:
    """One line from `fd`, byte by byte (no buffer reads past it: the next thing this process
    waits for on the same descriptor is its end)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def probe(url: str, interval: float) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {path: [] for path in PATHS}
    stdin = sys.stdin.fileno()
    connection = _Connection(url)
    try:
        for path in PATHS:  # connect and warm both handlers before the run starts
            connection.open()
            connection.get(path)
        print("ready", flush=True)
        if _read_line(stdin).strip() != b"go":
            return latencies  # the benchmark went away before its run
        stop = selectors.DefaultSelector()
        stop.register(stdin, selectors.EVENT_READ)
        while not stop.select(interval):
            for path, values in latencies.items():
                connection.open()
                sent = time.perf_counter()
                connection.get(path)
                values.append(time.perf_counter() - sent)
    finally:
        connection.close()
    return latencies


def launch(
    url: str, interval: float, *, preexec_fn: Callable[[], None] | None = None
) -> subprocess.Popen:
    """This script in a process of its own (a benchmark client's busy event loop would add its
    own delay to the readings), returned once connected and warm: it records from `start` on."""
    command = [sys.executable, str(Path(__file__).resolve()), url, "--interval", str(interval)]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=preexec_fn
    )
    line = process.stdout.readline()  # it prints `ready` or fails (and closes its stdout)
    if line.strip() != "ready":
        process.kill()
        process.communicate()  # reaps it and closes the pipes
        raise SystemExit(f"probe did not start (it said {line!r}; its error is above)")
    return process


def start(process: subprocess.Popen) -> None:
    process.stdin.write("go\n")
    process.stdin.flush()


def stop(process: subprocess.Popen) -> dict[str, list[float]]:
    """The latencies recorded since `start`; raises SystemExit when a probe failed."""
    out, _ = process.communicate(timeout=60)  # closes its stdin: it stops and prints
    if process.returncode:
        raise SystemExit(f"probe failed (exit {process.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between pairs")
    args = parser.parse_args()
    if not args.interval > 0:
        parser.error(f"--interval must be > 0 seconds, got {args.interval}")
    try:
        latencies = probe(args.url, args.interval)
    except (OSError, ValueError, ProbeError) as exc:  # a failed benchmark, not a slow one
        print(f"server_probe: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(latencies), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
