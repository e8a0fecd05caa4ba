"""Overload relative to capacity: does every request the server cannot serve get an answer?

Run: .venv/bin/python -m benchmarks.bench_overload [--repo DIR] [--requests 2000] [--levels 2,5,10]
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

With --bursts N1,N2,... it instead sends N concurrent requests at once from one address, per
N (no calibration), and reports the counts by status and the KV blocks in use once the burst is
over (issue 38's 1,500 / 3,000-request check, runnable against an older --repo).

Target: 0 transport errors and 0 5xx other than the documented 503s at every level. The client
is overload_client.py (raw HTTP/1.1 from one asyncio process). Prints a table; writes
benchmarks/results/overload.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.overload_client import (
    NOT_OPENAI,
    REQUEST_TIMEOUT_SECONDS,
    Outcome,
    counts,
    flood,
    get_text,
    raise_open_file_limit,
    request_bytes,
    send_one,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


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


async def _waiting(host: str, port: int, prefix: str = "batchgate_num_requests_waiting{"):
    """Requests queued in the engine (both classes), from /metrics (or another series by
    its `prefix`); None if unreadable."""
    text = await get_text(host, port, "/metrics")
    if text is None:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))  # fmt: skip


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
            1 for o in refused if o.retry_after is None or o.code in (None, NOT_OPENAI)
        ),
        "p99_ttft_served_s": p99(served),
        "recovery_s": recovered,
    }


async def run_burst(host: str, port: int, request: bytes, count: int) -> dict[str, Any]:
    """`count` requests at once; then the KV blocks in use once the engine is idle again."""
    outcomes = await flood(host, port, request, count)
    for _ in range(1200):  # bounded: the served streams end, the queue drains
        if (
            await _waiting(host, port) == 0
            and await _waiting(host, port, "batchgate_num_requests_running{") == 0
        ):
            break
        await asyncio.sleep(0.1)
    return {
        "requests": count,
        "by_status": counts(outcomes),
        "refusal_codes": dict(
            sorted(Counter(f"{o.status} {o.code}" for o in outcomes if o.code).items())
        ),
        "kv_blocks_used_after": await _waiting(host, port, "batchgate_kv_blocks_used "),
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


def _measure(args: argparse.Namespace, levels: list[float], bursts: list[int]) -> dict[str, Any]:
    """Starts the server, runs the bursts or the calibration and levels, stops it."""
    body = {"prompt": "hi", "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True}
    result: dict[str, Any] = {"repo": str(args.repo), "server_args": args.server_args.split(),
                              "request": body, "requests_per_level": args.requests}  # fmt: skip
    host = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="overload-") as tmp:
        child, port = _start_server(args.repo, result["server_args"], Path(tmp))
        try:
            request = request_bytes(host, port, "/v1/completions", body)
            for count in bursts:
                row = asyncio.run(run_burst(host, port, request, count))
                print(json.dumps(row), flush=True)
                result.setdefault("bursts", []).append(row)
            if not bursts:
                result.update(_levels(args, port, request, levels))
        finally:
            result["server_exit_code"] = child.stop(timeout_seconds=60)
    return result


def _levels(
    args: argparse.Namespace, port: int, request: bytes, levels: list[float]
) -> dict[str, Any]:
    host = "127.0.0.1"
    clients = _max_num_seqs(port)
    rps, done, window = asyncio.run(calibrate(host, port, request, clients, args.calibrate_seconds))
    tokens = rps * args.max_tokens
    print(f"capacity: {rps:.1f} requests/s ({tokens:.0f} output tokens/s), {clients} "
          f"closed-loop clients, {window:.1f} s", flush=True)  # fmt: skip
    calibration = {"clients": clients, "completed": done, "window_s": window,
                   "capacity_rps": rps, "output_tokens_per_s": tokens}  # fmt: skip
    probe = request_bytes(host, port, "/v1/completions", {"prompt": "hi", "max_tokens": 1})
    rows = []
    for level in levels:
        row = asyncio.run(run_level(host, port, request, probe, args.requests, level * rps))
        rows.append({"level": level, **row})
        print(f"{level:g}x: {json.dumps(row)}", flush=True)
    return {"calibration": calibration, "levels": rows}


def _print_levels(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'level':>5} {'offered/s':>9} {'sent/s':>7} {'by status':<34} {'transport':>9} "
          f"{'5xx!=503':>8} {'p99 TTFT s':>10} {'recover s':>9}")  # fmt: skip
    for r in rows:
        statuses = " ".join(f"{k}:{v}" for k, v in r["by_status"].items() if k.isdigit())
        print(f"{r['level']:>4g}x {r['offered_rps']:>9.1f} {_fmt(r['achieved_rps'], '7.1f')} "
              f"{statuses:<34} {r['transport_errors']:>9} {r['other_5xx']:>8} "
              f"{_fmt(r['p99_ttft_served_s'], '10.3f')} "
              f"{_fmt(r['recovery_s'], '9.2f')}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO_ROOT)
    parser.add_argument("--requests", type=int, default=2000, help="requests per level")
    parser.add_argument("--levels", default="2,5,10", help="multiples of the capacity")
    parser.add_argument("--bursts", default="", help="N1,N2: concurrent bursts instead")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens a request")
    parser.add_argument("--calibrate-seconds", type=float, default=10.0)
    parser.add_argument("--server-args", default="--device cpu", help="the server's flags")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks/results/overload.json")
    args = parser.parse_args(argv)
    try:
        levels = [float(x) for x in args.levels.split(",")]
        bursts = [int(x) for x in args.bursts.split(",") if x.strip()]
    except ValueError:
        parser.error("--levels / --bursts: not a comma-separated list of numbers")
    if args.requests < 1 or any(x <= 0 for x in [*levels, *bursts]):
        parser.error("--requests, every level and every burst must be > 0")
    args.repo = args.repo.resolve()
    raise_open_file_limit(max([args.requests, *bursts]) + 1024)
    result = _measure(args, levels, bursts)
    rows = result.get("levels", []) + result.get("bursts", [])
    if "levels" in result:
        _print_levels(result["levels"])
    for row in result.get("bursts", []):
        print(f"{row['requests']:>6} at once: {row['by_status']}; KV blocks in use after: "
              f"{row['kv_blocks_used_after']}")  # fmt: skip
    transport = sum(n for r in rows for k, n in r["by_status"].items() if not k.isdigit())
    other_5xx = sum(n for r in rows for k, n in r["by_status"].items()
                    if k.isdigit() and int(k) >= 500 and k != "503")  # fmt: skip
    result["target_met"] = transport == 0 and other_5xx == 0
    print(f"target (0 transport errors, 0 5xx other than 503): "
          f"{'met' if result['target_met'] else 'NOT met'}; server exit code "
          f"{result['server_exit_code']}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
