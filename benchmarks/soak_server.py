"""Soak the bundled server: steady load at a fraction of its measured capacity for a long time,
then drain; report RSS drift, KV blocks after the drain and non-OK responses.

Run: .venv/bin/python benchmarks/soak_server.py [--minutes 30] [--fraction 0.6] [--model tiny]

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
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from loadgen.profiles import PROFILES  # noqa: E402  (no Locust import: safe in this process)

PYTHON = sys.executable
SEGMENT_SECONDS = 60.0
TARGET_RSS_GROWTH = 0.05


def start_server(workdir: Path, model: str) -> tuple[subprocess.Popen, str]:
    port_file = workdir / "port"
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen(
        [PYTHON, "-m", "reference_server", "--port", "0", "--port-file", str(port_file),
         "--model", model, "--log-level", "warning"],
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"server exited: {(workdir / 'server.log').read_text()[-2000:]}")
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                url = f"http://127.0.0.1:{int(text)}"
                try:
                    if client.get(f"{url}/health").status_code == 200:
                        return process, url
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
    process.kill()
    raise SystemExit("server did not become healthy in 300 s")


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
    """RSS of the server's process tree, once a second, on a thread."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def rss_now(self) -> int:
        total = 0
        for proc in [self._root, *self._root.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

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
    parser.add_argument("--output", default=str(REPO_ROOT / "benchmarks" / "results" / "soak.json"))
    args = parser.parse_args()
    segments = max(1, round(args.minutes * 60 / SEGMENT_SECONDS))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        process, url = start_server(workdir, args.model)
        try:
            capacity = calibrate(url, workdir)
            rate = capacity * args.fraction
            print(f"capacity {capacity:.1f} req/s; soaking at {rate:.1f} req/s for "
                  f"{segments} x {SEGMENT_SECONDS:.0f} s", flush=True)  # fmt: skip
            sampler = RssSampler(process.pid)
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
            process.send_signal(signal.SIGTERM)
            exit_code = process.wait(timeout=120)
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
        "host": {"cpu_count": os.cpu_count(), "load_average": os.getloadavg()},
    }  # fmt: skip
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
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
    print(f"{'measure':<52}{'value':>14}")
    for name, value in table:
        print(f"{name:<52}{value:>14}")
    print(f"wrote {args.output}")
    ok = result["non_ok"] == 0 and kv_after == 0 and growth <= TARGET_RSS_GROWTH
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
