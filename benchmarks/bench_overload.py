"""Overload relative to capacity: does every request the server cannot serve get an answer?

Run: .venv/bin/python benchmarks/bench_overload.py [--repo DIR] [--requests 2000] [--levels 2,5,10]
(--repo: the checkout whose server to start, e.g. an unpacked `git archive` of older code, to
measure before/after with the same client.) It starts `python -m reference_server` on
127.0.0.1, port 0, with its defaults (plus --device cpu unless --server-args says otherwise):

1. calibrate: a closed loop of `max_num_seqs` clients (read from /admin/batching), each sending
   the next request as soon as its previous one ends, for --calibrate-seconds; capacity = the
   completed requests per second (and output tokens per second, shown);
2. for each level L (2x, 5x, 10x): --requests requests arriving at L x capacity per second,
   evenly spaced, each on its own connection from one address (a load generator's host);
3. per level: the counts by status (or transport error kind: a connection closed or reset with
   no complete HTTP answer), the p99 TTFT of the 200s, the 5xx other than 503 (none expected),
   and the time to recover: from the last arrival until a probe request is served 200 again
   and the engine has nothing queued.

Target: 0 transport errors and 0 5xx other than the documented 503s at every level. The client
is one asyncio process speaking raw HTTP/1.1 (cheap enough for thousands of sockets on two
cores); `flood` and `send_one` are also what tests/reference_server/api/test_server_overload.py
drives. Prints a table; writes benchmarks/results/overload.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# A request's whole life, connect to last byte; a served long stream stays well inside it.
REQUEST_TIMEOUT_SECONDS = 600.0
_READ_BYTES = 65_536
_NOT_OPENAI = "not OpenAI's error shape"


@dataclass
class Outcome:
    """How one request ended: an HTTP status, or `transport` naming what went wrong."""

    status: int | None = None
    transport: str | None = None  # "reset", "closed before status", "closed mid-body", ...
    code: str | None = None  # the OpenAI error code of a refusal
    retry_after: str | None = None
    ttft: float | None = None  # seconds from send to the first body byte of a 200 stream
    latency: float = 0.0

    @property
    def label(self) -> str:
        return str(self.status) if self.status is not None else f"transport: {self.transport}"


class _Response:
    """An incremental HTTP/1.1 response parser: status, headers, then a Content-Length or
    chunked body, so a response cut short is told from a complete one."""

    def __init__(self) -> None:
        self.buffer = b""
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.complete = False
        self._length: int | None = None
        self._chunked = False
        self._first_body_at: float | None = None

    def feed(self, data: bytes, now: float) -> None:
        self.buffer += data
        if self.status is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            lines = head.split("\r\n")
            self.status = int(lines[0].split()[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if not self._chunked:
                self._length = int(self.headers.get("content-length", "0"))
        if self.buffer and self._first_body_at is None:
            self._first_body_at = now
        if self._chunked:
            self._read_chunks()
        else:
            assert self._length is not None
            self.body += self.buffer
            self.buffer = b""
            self.complete = len(self.body) >= self._length

    def _read_chunks(self) -> None:
        while not self.complete:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.buffer[:line_end].split(b";")[0], 16)
            if len(self.buffer) < line_end + 2 + size + 2:
                return
            start = line_end + 2
            self.body += self.buffer[start : start + size]
            self.buffer = self.buffer[start + size + 2 :]
            self.complete = size == 0

    @property
    def first_body_at(self) -> float | None:
        return self._first_body_at


def request_bytes(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def send_one(
    host: str,
    port: int,
    request: bytes,
    *,
    source: str | None = None,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> Outcome:
    """One request on a new connection (from `source`, an address of this host), read to the
    end of its response, then closed."""
    started = time.perf_counter()
    outcome = Outcome()
    response = _Response()
    try:
        await asyncio.wait_for(_exchange(host, port, request, source, response, outcome), timeout)
    except asyncio.TimeoutError:
        outcome.transport = "timeout"
    except ConnectionRefusedError:
        outcome.transport = "connect refused"
    except ConnectionResetError:
        outcome.transport = "reset"
    except OSError as exc:
        outcome.transport = type(exc).__name__
    outcome.latency = time.perf_counter() - started
    if response.complete and outcome.transport is None:
        outcome.status = response.status
        outcome.retry_after = response.headers.get("retry-after")
        if response.status == 200 and response.first_body_at is not None:
            outcome.ttft = response.first_body_at - started
        elif response.status is not None and response.status >= 400:
            outcome.code = _error_code(bytes(response.body))
    elif outcome.transport is None:
        outcome.transport = "incomplete"
    return outcome


async def _exchange(
    host: str,
    port: int,
    request: bytes,
    source: str | None,
    response: _Response,
    outcome: Outcome,
) -> None:
    local = (source, 0) if source is not None else None
    reader, writer = await asyncio.open_connection(host, port, limit=_READ_BYTES, local_addr=local)
    try:
        writer.write(request)
        while not response.complete:
            data = await reader.read(_READ_BYTES)
            if not data:
                outcome.transport = (
                    "closed before status" if response.status is None else "closed mid-body"
                )
                return
            response.feed(data, time.perf_counter())
    finally:
        writer.close()


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return _NOT_OPENAI
    return str(error.get("code")) if isinstance(error, dict) else _NOT_OPENAI


async def flood(host: str, port: int, request: bytes, count: int) -> list[Outcome]:
    """`count` requests at once, each on its own connection."""
    return list(await asyncio.gather(*(send_one(host, port, request) for _ in range(count))))


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return dict(sorted(Counter(o.label for o in outcomes).items()))


def raise_open_file_limit(wanted: int) -> int:
    """The soft RLIMIT_NOFILE raised towards `wanted` (never past the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def get_bytes(host: str, port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


def p99(values: Sequence[float]) -> float | None:
    """Nearest-rank 99th percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


async def calibrate(host: str, port: int, request: bytes, clients: int, seconds: float):
    """A closed loop of `clients`: each sends its next request when its previous one ends.
    Returns (completed requests per second, completed requests, window seconds)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + seconds
    done: list[float] = []
    errors: list[str] = []

    async def client() -> None:
        while loop.time() < deadline:
            outcome = await send_one(host, port, request)
            if outcome.status != 200:
                errors.append(outcome.label)
                return
            done.append(loop.time())

    await asyncio.gather(*(client() for _ in range(clients)))
    if errors or not done:
        raise RuntimeError(f"calibration requests failed: {Counter(errors)}")
    window = max(done) - start
    return len(done) / window, len(done), window


async def _waiting(host: str, port: int) -> float | None:
    """Requests queued in the engine (both classes), from /metrics; None if unreadable."""
    outcome = Outcome()
    response = _Response()
    try:
        await _exchange(host, port, get_bytes(host, port, "/metrics"), None, response, outcome)
    except OSError:
        return None
    if response.status != 200 or not response.complete:
        return None
    total = 0.0
    for line in bytes(response.body).decode().splitlines():
        if line.startswith("batchgate_num_requests_waiting{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def recovery_seconds(
    host: str, port: int, probe: bytes, since: float, limit: float
) -> float | None:
    """From `since` (the last arrival) until a probe request is served 200 and nothing is
    queued in the engine; None if that does not happen within `limit` seconds."""
    loop = asyncio.get_running_loop()
    while loop.time() - since < limit:
        outcome = await send_one(host, port, probe, timeout=limit)
        if outcome.status == 200 and await _waiting(host, port) == 0:
            return loop.time() - since
        await asyncio.sleep(0.05)
    return None


async def run_level(
    host: str, port: int, request: bytes, probe: bytes, count: int, rate: float
) -> dict[str, Any]:
    """`count` arrivals at `rate`/s (open loop), the recovery after them, and the tally."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for index in range(count):
        delay = start + index / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(send_one(host, port, request)))
    last_arrival = loop.time()
    recovered = await recovery_seconds(host, port, probe, last_arrival, REQUEST_TIMEOUT_SECONDS)
    outcomes: list[Outcome] = list(await asyncio.gather(*tasks))
    served = [o.ttft for o in outcomes if o.status == 200 and o.ttft is not None]
    refused = [o for o in outcomes if o.status in (429, 503)]
    return {
        "offered_rps": rate,
        "achieved_rps": (count - 1) / (last_arrival - start) if count > 1 else None,
        "requests": count,
        "by_status": counts(outcomes),
        "refusal_codes": dict(sorted(Counter(f"{o.status} {o.code}" for o in refused).items())),
        "transport_errors": sum(1 for o in outcomes if o.status is None),
        "other_5xx": sum(1 for o in outcomes if o.status and o.status >= 500 and o.status != 503),
        "refusals_without_retry_after_or_error_shape": sum(
            1 for o in refused if o.retry_after is None or o.code in (None, _NOT_OPENAI)
        ),
        "p99_ttft_served_s": p99(served),
        "recovery_s": recovered,
    }


def _start_server(repo: Path, args: list[str], workdir: Path):
    from gate.orchestrator.processes import (
        python_argv,
        start_child,
        wait_for_health,
        wait_for_port_file,
    )

    port_file = workdir / "port"
    argv = python_argv("reference_server", ["--port", "0", "--port-file", str(port_file), *args])
    child = start_child(
        "server",
        argv,
        log_path=workdir / "server.log",
        cwd=repo,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        port = wait_for_port_file(child, port_file, timeout_seconds=180)
        wait_for_health(f"http://127.0.0.1:{port}", timeout_seconds=180, child=child)
    except BaseException:
        child.stop()
        raise
    return child, port


def _max_num_seqs(port: int) -> int:
    import httpx

    batching = httpx.get(f"http://127.0.0.1:{port}/admin/batching", timeout=30).json()
    return int(batching.get("batching", batching)["max_num_seqs"])


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO_ROOT)
    parser.add_argument("--requests", type=int, default=2000, help="requests per level")
    parser.add_argument("--levels", default="2,5,10", help="multiples of the capacity")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens a request")
    parser.add_argument("--calibrate-seconds", type=float, default=10.0)
    parser.add_argument(
        "--server-args",
        default="--device cpu",
        help="extra server flags (default: the server's defaults on CPU)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks/results/overload.json")
    args = parser.parse_args(argv)
    try:
        levels = [float(x) for x in args.levels.split(",")]
    except ValueError:
        parser.error(f"--levels: not a comma-separated list of numbers: {args.levels!r}")
    if args.requests < 1 or any(level <= 0 for level in levels):
        parser.error("--requests and every level must be > 0")
    raise_open_file_limit(args.requests + 1024)
    repo = args.repo.resolve()
    server_args = args.server_args.split()
    body = {"prompt": "hi", "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True}
    host = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="overload-") as tmp:
        child, port = _start_server(repo, server_args, Path(tmp))
        try:
            request = request_bytes(host, port, "/v1/completions", body)
            probe = request_bytes(host, port, "/v1/completions", {"prompt": "hi", "max_tokens": 1})
            clients = _max_num_seqs(port)
            rps, completed, window = asyncio.run(
                calibrate(host, port, request, clients, args.calibrate_seconds)
            )
            calibration = {
                "clients": clients,
                "completed": completed,
                "window_s": window,
                "capacity_rps": rps,
                "output_tokens_per_s": rps * args.max_tokens,
            }
            print(
                f"capacity: {rps:.1f} requests/s ({rps * args.max_tokens:.0f} output "
                f"tokens/s), {clients} closed-loop clients, {window:.1f} s",
                flush=True,
            )
            rows = []
            for level in levels:
                row = asyncio.run(run_level(host, port, request, probe, args.requests, level * rps))
                row["level"] = level
                rows.append(row)
                print(f"{level:g}x: {json.dumps(row)}", flush=True)
        finally:
            code = child.stop(timeout_seconds=60)
    target_met = all(r["transport_errors"] == 0 and r["other_5xx"] == 0 for r in rows)
    print(
        f"\n{'level':>5} {'offered/s':>9} {'sent/s':>7} {'by status':<34} {'transport':>9} "
        f"{'5xx!=503':>8} {'p99 TTFT s':>10} {'recover s':>9}"
    )
    for r in rows:
        statuses = " ".join(f"{k}:{v}" for k, v in r["by_status"].items() if k.isdigit())
        print(
            f"{r['level']:>4g}x {r['offered_rps']:>9.1f} {_fmt(r['achieved_rps'], '7.1f')} "
            f"{statuses:<34} {r['transport_errors']:>9} {r['other_5xx']:>8} "
            f"{_fmt(r['p99_ttft_served_s'], '10.3f')} {_fmt(r['recovery_s'], '9.2f')}"
        )
    print(
        f"target (0 transport errors, 0 5xx other than 503, every level): "
        f"{'met' if target_met else 'NOT met'}; server exit code {code}"
    )
    result = {
        "repo": str(repo),
        "server_args": server_args,
        "request": body,
        "requests_per_level": args.requests,
        "calibration": calibration,
        "levels": rows,
        "target_met": target_met,
        "server_exit_code": code,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if target_met else 1


if __name__ == "__main__":
    sys.exit(main())
