"""A liveness probe and a scraper in one small process: GETs /health and /metrics in turn, one
pair every `interval` seconds, and prints their latencies as JSON (`{"/health": [s, ...],
"/metrics": [...]}`). It stands for the kubelet and Prometheus beside a saturated server.

Protocol with the benchmark that starts it (bench_server.py, through `launch`, `start` and
`stop` here), so that nothing of its own start lands in a measured run: it imports, connects
and probes each path once, then prints `ready`; it records from the line `go` on stdin until
stdin closes, then prints the JSON. Its start used to fall inside the run it measured: half a
second of CPU (the benchmark's imports) taken from a server on a 2-core machine, and a first
probe that paid for the TCP connection.

    python benchmarks/server_probe.py URL [--interval 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

PATHS = ("/health", "/metrics")


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
    with httpx.Client(base_url=url, timeout=30) as http:
        for path in PATHS:  # connect and warm both handlers before the run starts
            http.get(path).raise_for_status()
        print("ready", flush=True)
        if _read_line(stdin).strip() != b"go":
            return latencies  # the benchmark went away before its run
        stop = selectors.DefaultSelector()
        stop.register(stdin, selectors.EVENT_READ)
        while not stop.select(interval):
            for path, values in latencies.items():
                sent = time.perf_counter()
                http.get(path).raise_for_status()
                values.append(time.perf_counter() - sent)
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
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # a failed benchmark, not a slow one
        print(f"server_probe: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(latencies), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
