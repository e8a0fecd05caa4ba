"""Benchmark of trace replay fidelity: does `batchgate load --profile trace` send each request of
a production trace at its (scaled) timestamp?

For a window of each trace (10 minutes by default: Mooncake conversation, Azure 2023
conversation), replayed against the fake OpenAI server of tests/loadgen (a trivial fast streaming
endpoint, so the target never holds the client back) by one load-generator process pinned to one
core (when `taskset` exists):
- at 1x (the trace's own timing), and
- at the time scale that makes the window's mean rate `--fast-rps` (200 req/s by default),
it reports the send-time error against the scaled timestamps (sent_at - planned_at: p50, p99,
max), the exact request count (records = window lines = sent), errors and the client's CPU.
Target: send-time error p99 <= 2 ms at 200 req/s. Prints a table and writes
benchmarks/results/trace.json.

    .venv/bin/python -m benchmarks.bench_trace [--mooncake PATH] [--azure PATH]
        [--window-seconds 600] [--fast-rps 200] [--skip-1x]

Without paths it uses the packaged excerpts (300 s of Mooncake, 84 s of Azure: shorter windows).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_loadgen import cpu_prefix, fake_server
from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, Server, write_result
from loadgen.profiles import resolve
from loadgen.traces import packaged_trace_path

RESULTS = RESULTS_DIR / "trace.json"

TARGET_P99_SECONDS = 0.002


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _window(path: str, fmt: str, seconds: float) -> tuple[int, float]:
    """(requests in the window, its mean rate at 1x)."""
    spec = resolve(
        "trace",
        {"path": path, "format": fmt, "duration_seconds": seconds, "length_scale": 0.0625},
    )
    assert spec.replay is not None
    return len(spec.replay.requests), len(spec.replay.requests) / spec.replay.duration_seconds


def replay_point(
    server: Server, tmp: Path, name: str, path: str, fmt: str, seconds: float, scale: float
) -> dict[str, Any]:
    out = tmp / f"{name}-{scale:g}"
    cmd = [
        *cpu_prefix(0), sys.executable, "-m", "loadgen", "--target", server.url,
        "--profile", "trace", "--out", str(out), "--model", "fake-model", "--scale", "full",
        "--set", f"path={path}", "--set", f"format={fmt}",
        "--set", f"duration_seconds={seconds}", "--set", f"time_scale={scale}",
        # Prompts of ~750 tokens (Mooncake's 12k / 16) and answers of a few tokens: the fake
        # server answers at once, so only the client's own timing is measured.
        "--set", "length_scale=0.0625", "--set", "max_output_tokens=2",
        "--set", "max_client_cpu_ratio=1.5", "--set", "max_schedule_lag_p99_seconds=1",
        "--set", "max_concurrency=1024",
    ]  # fmt: skip
    began = time.monotonic()
    subprocess_run(cmd, timeout=seconds / scale + 180)
    wall = time.monotonic() - began
    load = json.loads((out / "load.json").read_text())
    window = (out / "trace.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    errors = [r for r in records if r["sent_at"] is None or r["status"] != "ok"]
    lags = [r["sent_at"] - r["planned_at"] for r in records if r["sent_at"] is not None]
    indexes = sorted(r["trace_index"] for r in records)
    return {
        "trace": name,
        "time_scale": scale,
        "window_lines": len(window),
        "records": len(records),
        "sent": load["sent_requests"],
        "count_exact": len(records) == len(window) == load["sent_requests"]
        and indexes == sorted(json.loads(line)["trace_index"] for line in window),
        "errors": len(errors),
        "mean_rps": load["target_rate_rps"],
        "send_error_p50_ms": _percentile(lags, 0.50) * 1000,
        "send_error_p99_ms": _percentile(lags, 0.99) * 1000,
        "send_error_max_ms": max(lags) * 1000 if lags else float("nan"),
        "client_cpu_mean": load["client_cpu_ratio"]["mean"],
        "client_cpu_max": load["client_cpu_ratio"]["max"],
        "wall_seconds": wall,
    }


def subprocess_run(cmd: list[str], *, timeout: float) -> None:
    import subprocess

    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"loadgen exited {result.returncode}: {result.stderr[-2000:]}")


def _default(shared: str, packaged: str) -> str:
    path = REPO.parent / "shared" / "traces" / shared
    return str(path) if path.exists() else str(packaged_trace_path(packaged))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mooncake", default=_default(
        "mooncake_conversation_trace.jsonl", "mooncake_conversation_excerpt"))  # fmt: skip
    parser.add_argument("--azure", default=_default(
        "azure_llm_2023_conv.csv", "azure_conv_2023_excerpt"))  # fmt: skip
    parser.add_argument("--window-seconds", type=float, default=600.0)
    parser.add_argument("--fast-rps", type=float, default=200.0)
    parser.add_argument("--skip-1x", action="store_true", help="only the fast replay")
    args = parser.parse_args()
    traces = (("mooncake", args.mooncake, "mooncake"), ("azure", args.azure, "azure"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with fake_server("--ttft-ms", "0", "--itl-ms", "0") as server:
            for name, path, fmt in traces:
                _, rate = _window(path, fmt, args.window_seconds)
                scales = [args.fast_rps / rate] if args.skip_1x else [1.0, args.fast_rps / rate]
                for scale in scales:
                    row = replay_point(server, tmp, name, path, fmt, args.window_seconds, scale)
                    rows.append(row)
                    print(f"{name} x{scale:.3g}: {json.dumps(row)}", file=sys.stderr, flush=True)
    header = (
        f"{'trace':<9} {'scale':>7} {'req/s':>7} {'lines':>6} {'sent':>6} {'exact':>5} "
        f"{'err':>4} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'cpu':>5}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['trace']:<9} {r['time_scale']:>7.3g} {r['mean_rps']:>7.1f} "
            f"{r['window_lines']:>6} {r['sent']:>6} {r['count_exact']!s:>5} "
            f"{r['errors']:>4} {r['send_error_p50_ms']:>7.3f} {r['send_error_p99_ms']:>7.3f} "
            f"{r['send_error_max_ms']:>7.2f} {r['client_cpu_mean']:>5.2f}"
        )
    fast = [r for r in rows if r["mean_rps"] >= args.fast_rps * 0.99]
    met = all(r["send_error_p99_ms"] <= TARGET_P99_SECONDS * 1000 for r in fast)
    print(f"target send-time error p99 <= 2 ms at >= {args.fast_rps:g} req/s: "
          f"{'met' if met else 'NOT met'}")  # fmt: skip
    write_result(RESULTS, {"window_seconds": args.window_seconds, "rows": rows, "target_met": met})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
