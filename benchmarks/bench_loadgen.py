"""Benchmark of the load generator: how much open-loop load one process sustains on one core.

Measures, against the fake OpenAI server of tests/loadgen (a trivial fast streaming endpoint):
1. the highest open-loop Poisson rate one `python -m loadgen` process (pinned to one core when
   `taskset` exists) keeps with schedule lag p99 <= 5 ms, no errors and every planned request sent;
2. plain Locust closed loop (HttpUser and FastHttpUser, 64 users, one core) on the same endpoint;
3. client overhead: client-measured TTFT minus the server's own TTFT, at low load.
Prints a table and writes benchmarks/results/loadgen.json.

    .venv/bin/python -m benchmarks.bench_loadgen [--rates 250,500,1000,1500] [--duration 5]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, Server, write_result

FAKE = REPO / "tests" / "loadgen" / "fake_openai_server.py"
RESULTS = RESULTS_DIR / "loadgen.json"
LAG_LIMIT_SECONDS = 0.005

LOCUSTFILE = """
from locust import FastHttpUser, HttpUser, task

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2, "stream": True}


class PlainHttpUser(HttpUser):
    @task
    def chat(self):
        self.client.post("/v1/chat/completions", json=BODY)


class PlainFastHttpUser(FastHttpUser):
    @task
    def chat(self):
        self.client.post("/v1/chat/completions", json=BODY)
"""


def cpu_prefix(core: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(core)]
    return []


def fake_server(*flags: str) -> Server:
    """The fake OpenAI server of tests/loadgen (not started), pinned to the last core when
    `taskset` exists (the load process gets core 0)."""
    last_core = (os.cpu_count() or 1) - 1
    return Server(
        [*cpu_prefix(last_core), sys.executable, str(FAKE), *flags],
        name="fake OpenAI server", start_timeout_seconds=20, stop_timeout_seconds=10,
    )  # fmt: skip


def fake_stats(server: Server) -> dict[str, Any]:
    """The fake server's own record of what it served (its TTFTs among them)."""
    with urllib.request.urlopen(server.url + "/stats", timeout=5) as resp:
        return json.loads(resp.read())


def steady_load(
    server: Server, out: Path, rate: float, duration: float, *sets: str, pinned: bool
) -> None:
    """`python -m loadgen --profile steady` against the fake server, `--set` each of `sets`;
    `pinned`: on core 0 (when `taskset` exists), the core the measured load process gets."""
    cmd = [
        *(cpu_prefix(0) if pinned else ()), sys.executable, "-m", "loadgen",
        "--target", server.url, "--profile", "steady",
        "--out", str(out), "--rate", f"{rate:g}", "--duration", str(duration),
        "--model", "fake-model", *(arg for item in sets for arg in ("--set", item)),
    ]  # fmt: skip
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=duration + 120)


def open_loop_point(server: Server, tmp: Path, rate: float, duration: float) -> dict[str, Any]:
    out = tmp / f"open-{rate:g}"
    steady_load(
        server, out, rate, duration, "output_tokens=2", "prompt_tokens=16",
        "max_client_cpu_ratio=1.5", f"max_schedule_lag_p99_seconds={LAG_LIMIT_SECONDS}",
        pinned=True,
    )  # fmt: skip
    load = json.loads((out / "load.json").read_text())
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    ttfts = [r["first_token_at"] - r["sent_at"] for r in recs if r["first_token_at"] is not None]
    errors = sum(n for s, n in load["counts_by_status"].items() if s != "ok")
    lag_p99 = load["schedule_lag_seconds"]["p99"]
    return {
        "target_rps": rate,
        "achieved_rps": load["achieved_rate_rps"],
        "planned": load["planned_requests"],
        "sent": load["sent_requests"],
        "errors": errors,
        "lag_p99_ms": lag_p99 * 1000,
        "client_cpu_mean": load["client_cpu_ratio"]["mean"],
        "client_cpu_max": load["client_cpu_ratio"]["max"],
        "ttft_p50_ms": statistics.median(ttfts) * 1000 if ttfts else None,
        # CPU the load process spent per request: 1e6 / this is the rate one fully available
        # core could carry (a projection; the lag column is the measurement)
        "cpu_us_per_request": load["client_cpu_ratio"]["mean"] * duration / max(len(recs), 1) * 1e6,
        "sustained": lag_p99 <= LAG_LIMIT_SECONDS
        and errors == 0
        and load["sent_requests"] == load["planned_requests"],
    }


def locust_point(server: Server, tmp: Path, user_class: str, duration: float) -> dict[str, Any]:
    locustfile = tmp / "bench_locustfile.py"
    locustfile.write_text(LOCUSTFILE)
    prefix = tmp / f"locust-{user_class}"
    cmd = [
        *cpu_prefix(0),
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        user_class,
        "--headless",
        "-u",
        "64",
        "-r",
        "64",
        "-t",
        f"{int(duration)}s",
        "--host",
        server.url,
        "--csv",
        str(prefix),
        "--only-summary",
    ]
    subprocess.run(cmd, cwd=tmp, check=True, capture_output=True, timeout=duration + 60)
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    agg = rows["Aggregated"]
    return {
        "user_class": user_class,
        "rps": float(agg["Requests/s"]),
        "failures": int(agg["Failure Count"]),
        "p50_ms": float(agg["50%"]),
        "p99_ms": float(agg["99%"]),
    }


def client_overhead(tmp: Path, duration: float) -> dict[str, Any]:
    with fake_server("--ttft-ms", "20", "--itl-ms", "1", "--tokens", "4") as server:
        out = tmp / "overhead"
        steady_load(server, out, 5, duration, "prompt_tokens=16", pinned=False)
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        client = statistics.median(r["first_token_at"] - r["sent_at"] for r in recs)
        server_side = statistics.median(fake_stats(server)["ttft_seconds"])
    return {
        "requests": len(recs),
        "client_ttft_p50_ms": client * 1000,
        "server_ttft_p50_ms": server_side * 1000,
        "overhead_ms": (client - server_side) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="250,500,1000,1500,2000", help="open-loop rates to try, req/s"
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per point")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with fake_server("--ttft-ms", "0", "--itl-ms", "0", "--tokens", "2") as server:
            points = [open_loop_point(server, tmp, r, args.duration) for r in rates]
            baselines = [
                locust_point(server, tmp, c, args.duration)
                for c in ("PlainHttpUser", "PlainFastHttpUser")
            ]
        overhead = client_overhead(tmp, 4.0)
    sustained = [p["target_rps"] for p in points if p["sustained"]]
    result = {
        "cpu_count": os.cpu_count(),
        "pinned": bool(cpu_prefix(0)),
        "load_average": os.getloadavg(),
        "lag_limit_ms": LAG_LIMIT_SECONDS * 1000,
        "open_loop": points,
        "max_sustained_open_loop_rps": max(sustained) if sustained else 0.0,
        "locust_closed_loop": baselines,
        "client_overhead": overhead,
    }
    write_result(RESULTS, result)
    print(
        f"open loop, one loadgen process{' pinned to core 0' if result['pinned'] else ''}; "
        f"fake server: ttft 0, itl 0, 2 tokens; load average {result['load_average'][0]:.1f}"
    )
    print(
        f"{'target':>8} {'achieved':>9} {'sent/planned':>13} {'errors':>6} {'lag p99':>9} "
        f"{'cpu mean':>8} {'cpu max':>8} {'cpu/req':>8} {'ttft p50':>9}  ok"
    )
    for p in points:
        print(
            f"{p['target_rps']:8.0f} {p['achieved_rps']:9.1f} {p['sent']:>6}/{p['planned']:<6} "
            f"{p['errors']:6d} {p['lag_p99_ms']:7.2f}ms {p['client_cpu_mean']:8.2f} "
            f"{p['client_cpu_max']:8.2f} {p['cpu_us_per_request']:6.0f}us "
            f"{p['ttft_p50_ms'] or 0:7.2f}ms  {'yes' if p['sustained'] else 'no'}"
        )
    print(
        "max sustained open-loop rate (lag p99 <= 5 ms): "
        f"{result['max_sustained_open_loop_rps']:.0f} req/s"
    )
    print("plain Locust closed loop, 64 users, same core and endpoint:")
    for b in baselines:
        print(
            f"  {b['user_class']:<18} {b['rps']:8.1f} req/s  p50 {b['p50_ms']:.0f} ms  "
            f"p99 {b['p99_ms']:.0f} ms  failures {b['failures']}"
        )
    o = overhead
    print(
        f"client overhead at 5 req/s: client TTFT p50 {o['client_ttft_p50_ms']:.2f} ms - server "
        f"TTFT p50 {o['server_ttft_p50_ms']:.2f} ms = {o['overhead_ms']:.2f} ms"
    )
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
