"""Soak the bundled server: steady load at a fraction of its measured capacity for a long time,
then drain; report RSS drift, KV blocks after the drain and non-OK responses.

Run: .venv/bin/python -m benchmarks.soak_server [--minutes 30] [--fraction 0.6] [--model tiny]

1. Start `python -m reference_server` (the engine core in its own process; RSS is summed over
   the server's process tree) and calibrate it with `batchgate calibrate --target`; capacity
   for the steady profile's mix = calibrated output tokens/s / its mean output tokens (80).
2. Run `python -m loadgen --profile steady` open-loop (Poisson) at `fraction` x capacity for
   `minutes`, in one-minute segments so progress and RSS are visible while it runs; RSS of the
   server tree is sampled every second.
3. After the load: wait for the server to go idle, read `batchgate_kv_blocks_used` from /metrics
   (must be 0), count every request whose status is not 200 or that ended in an error, and
   compare RSS after warm-up (the end of the first segment) with the end.
Prints a table and writes benchmarks/results/soak.json. The machine's speed sets the rate (it is
calibrated), so the check means the same on any machine; the targets are the issue's: RSS growth
<= 5% after warm-up, KV 0, 0 non-OK responses.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness import REPO_ROOT, RESULTS_DIR, Server, host_facts, print_table, write_result
from loadgen.profiles import PROFILES  # no Locust import: safe in this process

PYTHON = sys.executable
SEGMENT_SECONDS = 60.0
TARGET_RSS_GROWTH = 0.05


def calibrate(url: str, workdir: Path) -> float:
    out = workdir / "calibration"
    subprocess.run(
        [PYTHON, "-m", "gate.cli", "calibrate", "--target", url, "--out", str(out),
         "--run-id", "soak"],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    data = json.loads((out / "calibrate-soak" / "calibration.json").read_text())
    # The capacity for the steady profile's own mix (as `"0.6x capacity"` in a gates file
    # means, docs/calibration.md): calibrated output tokens/s / the mix's mean output tokens.
    output = PROFILES["steady"][0]["output_tokens"]
    mean_output_tokens = (output["low"] + output["high"]) / 2
    return float(data["capacity"]["short"]["output_tokens_per_second"]) / mean_output_tokens


class RssSampler:
    """RSS of the server's process tree (Server.tree_rss_bytes), once a second, on a thread."""

    def __init__(self, server: Server) -> None:
        self.rss_now = server.tree_rss_bytes
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append((time.monotonic(), self.rss_now()))


def run_segment(url: str, out: Path, rate: float, seconds: float, seed: int) -> list[dict]:
    subprocess.run(
        [PYTHON, "-m", "loadgen", "--target", url, "--profile", "steady", "--out", str(out),
         "--rate", f"{rate:.4f}", "--duration", f"{seconds:.1f}", "--seed", str(seed)],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=seconds * 3 + 120,
    )  # fmt: skip
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def kv_blocks_used(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "batchgate_kv_blocks_used":
                return sample.value
    raise SystemExit("/metrics has no batchgate_kv_blocks_used")


def wait_idle(url: str, timeout_seconds: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_seconds
    used = kv_blocks_used(url)
    while used and time.monotonic() < deadline:
        time.sleep(0.5)
        used = kv_blocks_used(url)
    return used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--fraction", type=float, default=0.6, help="share of capacity")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--output", default=str(RESULTS_DIR / "soak.json"))
    args = parser.parse_args()
    segments = max(1, round(args.minutes * 60 / SEGMENT_SECONDS))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        # Up to 120 s to drain and exit after SIGTERM: its exit code is one of the results.
        server = Server.bundled(
            "--model", args.model, "--log-level", "warning", workdir=workdir,
            stop_timeout_seconds=120.0,
        ).start()  # fmt: skip
        url = server.url
        try:
            capacity = calibrate(url, workdir)
            rate = capacity * args.fraction
            print(f"capacity {capacity:.1f} req/s; soaking at {rate:.1f} req/s for "
                  f"{segments} x {SEGMENT_SECONDS:.0f} s", flush=True)  # fmt: skip
            sampler = RssSampler(server)
            sampler.start()
            rows = []
            for index in range(segments):
                records = run_segment(url, workdir / f"seg{index}", rate, SEGMENT_SECONDS, index)
                bad = [r for r in records if r.get("status") != "ok" or r.get("http_status") != 200]
                errors = sorted({str(r.get("error"))[:80] for r in bad})[:5]
                rows.append({"segment": index, "requests": len(records), "non_ok": len(bad),
                             "rss_bytes": sampler.rss_now(), "errors": errors})  # fmt: skip
                print(f"segment {index + 1}/{segments}: {len(records)} requests, "
                      f"{len(bad)} non-OK, RSS {rows[-1]['rss_bytes'] / 2**20:.1f} MiB",
                      flush=True)  # fmt: skip
            sampler.stop()
            kv_after = wait_idle(url)
            rss_end = sampler.rss_now()
        finally:
            exit_code = server.stop()
    warm = rows[0]["rss_bytes"]
    growth = (rss_end - warm) / warm
    peak = max((rss for _, rss in sampler.samples), default=rss_end)
    result = {
        "minutes": args.minutes, "fraction": args.fraction, "model": args.model,
        "capacity_rps": capacity, "rate_rps": rate, "segments": rows,
        "requests": sum(r["requests"] for r in rows), "non_ok": sum(r["non_ok"] for r in rows),
        "rss_after_warmup_bytes": warm, "rss_end_bytes": rss_end, "rss_peak_bytes": peak,
        "rss_growth_after_warmup": growth, "kv_blocks_used_after_drain": kv_after,
        "server_exit_code": exit_code,
        "rss_samples": sampler.samples[:: max(1, len(sampler.samples) // 300)],
        "host": host_facts(),
    }  # fmt: skip
    write_result(args.output, result)
    table = [
        ("capacity (req/s, calibrated)", f"{capacity:.1f}"),
        (f"offered rate (req/s, {args.fraction:.0%})", f"{rate:.1f}"),
        ("duration (min)", f"{segments * SEGMENT_SECONDS / 60:.0f}"),
        ("requests", f"{result['requests']}"),
        ("non-OK responses (target 0)", f"{result['non_ok']}"),
        ("RSS after warm-up (MiB)", f"{warm / 2**20:.1f}"),
        ("RSS at end (MiB)", f"{rss_end / 2**20:.1f}"),
        ("RSS peak (MiB)", f"{peak / 2**20:.1f}"),
        (f"RSS growth after warm-up (target <= {TARGET_RSS_GROWTH:.0%})", f"{growth:+.2%}"),
        ("KV blocks used after drain (target 0)", f"{kv_after:.0f}"),
        ("server exit code after SIGTERM", f"{exit_code}"),
    ]
    print_table(("measure", "value"), table)
    print(f"wrote {args.output}")
    ok = result["non_ok"] == 0 and kv_after == 0 and growth <= TARGET_RSS_GROWTH
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
