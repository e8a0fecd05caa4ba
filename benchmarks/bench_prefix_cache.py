"""Benchmark: what the bundled server's prefix cache does for a replayed production trace.

One bundled server (CPU tiny model), the default gates' trace window (the first 120 s of the
packaged Mooncake conversation excerpt, lengths / 32), replayed by `python -m loadgen` with the
prefix cache on and off (switched live through `PUT /admin/batching`, same server, same process,
alternating `--rounds` times so drift hits both alike). Per run: the server's hit ratio (its
counters' change over the run), the gate's ideal for the window (an LRU of the server's KV
capacity, and an unbounded one), TTFT p50 / p99 and output tokens/s. Prints a table and writes
benchmarks/results/prefix_cache.json.

    .venv/bin/python -m benchmarks.bench_prefix_cache [--time-scale 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, Server, write_result
from gate.metrics.prefix_ideal import ideal_hit_ratio

RESULTS = RESULTS_DIR / "prefix_cache.json"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _put(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="PUT",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _counters(url: str) -> dict[str, float]:
    wanted = ("batchgate_prefix_cache_hits_total", "batchgate_prefix_cache_queries_total",
              "batchgate_kv_capacity_tokens")  # fmt: skip
    found = {}
    for line in _get(url + "/metrics").decode().splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            found[name] = float(value)
    return found


def one_run(url: str, out: Path, cache: bool, time_scale: float) -> dict[str, Any]:
    _put(url + "/admin/batching", {"enable_prefix_caching": cache})
    before = _counters(url)
    cmd = [
        sys.executable, "-m", "loadgen", "--target", url, "--profile", "trace", "--out", str(out),
        "--scale", "full", "--set", "duration_seconds=120", "--set", "length_scale=0.03125",
        "--set", f"time_scale={time_scale}", "--set", "max_schedule_lag_p99_seconds=1",
    ]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    wall = time.monotonic() - began
    after = _counters(url)
    hits = after["batchgate_prefix_cache_hits_total"] - before["batchgate_prefix_cache_hits_total"]
    queries = (
        after["batchgate_prefix_cache_queries_total"]
        - before["batchgate_prefix_cache_queries_total"]
    )
    window = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    rows = [(w["hash_ids"], w.get("block_tokens"), w["input_tokens"]) for w in window]
    capacity = int(after["batchgate_kv_capacity_tokens"])
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in records if r["status"] == "ok"]
    ttfts = sorted(r["first_token_at"] - r["sent_at"] for r in ok)
    load = json.loads((out / "load.json").read_text())
    span = max(r["done_at"] for r in ok) - min(r["sent_at"] for r in ok)
    return {
        "cache": "on" if cache else "off",
        "requests": len(records),
        "ok": len(ok),
        "server_hit_ratio": hits / queries if queries else 0.0,
        "ideal_kv_lru": ideal_hit_ratio(rows, capacity_tokens=capacity).ratio,
        "ideal_unbounded": ideal_hit_ratio(rows).ratio,
        "kv_capacity_tokens": capacity,
        "ttft_p50_ms": statistics.median(ttfts) * 1000,
        "ttft_p99_ms": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] * 1000,
        "output_tokens_per_second": sum(r["output_tokens"] or 0 for r in ok) / span,
        "schedule_lag_p99_ms": load["schedule_lag_seconds"]["p99"] * 1000,
        "wall_seconds": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with Server.bundled(start_timeout_seconds=120, stop_timeout_seconds=30) as server:
            url = server.url
            for i in range(args.rounds):
                for cache in (True, False) if i % 2 == 0 else (False, True):
                    row = one_run(url, tmp / f"r{i}-{cache}", cache, args.time_scale)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"{'cache':<5} {'reqs':>5} {'hit ratio':>9} {'ideal(KV)':>9} {'ideal(inf)':>10} "
          f"{'of ideal':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'out tok/s':>9}")  # fmt: skip
    for r in rows:
        share = r["server_hit_ratio"] / r["ideal_kv_lru"] if r["ideal_kv_lru"] else float("nan")
        print(
            f"{r['cache']:<5} {r['ok']:>5} {r['server_hit_ratio']:>9.3f} {r['ideal_kv_lru']:>9.3f} "
            f"{r['ideal_unbounded']:>10.3f} {share:>8.2f} {r['ttft_p50_ms']:>7.1f}ms "
            f"{r['ttft_p99_ms']:>7.1f}ms {r['output_tokens_per_second']:>9.1f}"
        )
    write_result(RESULTS, {"time_scale": args.time_scale, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
