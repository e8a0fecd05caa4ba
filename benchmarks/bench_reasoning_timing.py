"""Benchmark: reasoning-aware timing against a fake server with known delays (issue 39).

The fake OpenAI server of tests/loadgen streams `--reasoning-tokens` reasoning chunks from
`--ttft-ms` on, then the answer from `--content-ms` on (both after reading the request). A
`python -m loadgen --profile steady` run at a low rate records them; the table compares the
medians of the gate's TTFT (first token of either kind) and TTFC (first answer token), measured
by the gate's own formulas from the run's records, with the injected delays, once for each
reasoning field (`reasoning_content`, vLLM/DeepSeek; `reasoning`, OpenAI-style). Writes
benchmarks/results/reasoning_timing.json.

    .venv/bin/python -m benchmarks.bench_reasoning_timing [--duration 6] [--rate 8]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_loadgen import fake_server, fake_stats
from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, print_table, write_result
from gate.gates.spec import Scope, Settings, Slos
from gate.metrics.derive import measure
from gate.rundir.run import load_run

RESULTS = RESULTS_DIR / "reasoning_timing.json"
FIRST_REASONING_MS = 40.0
FIRST_CONTENT_MS = 90.0


def _median_ms(run_dir: Path, metric: str) -> tuple[float, int]:
    profile = next(iter(load_run(run_dir).profiles.values()))
    got = measure(
        profile, metric, "p50", Scope(), slos=Slos(), settings=Settings(), warmup_seconds=0.0
    )
    values = got.values  # type: ignore[union-attr]
    return 1000.0 * float(statistics.median(values)), len(values)


def point(field: str, tmp: Path, duration: float, rate: float) -> dict[str, Any]:
    flags = ["--ttft-ms", str(FIRST_REASONING_MS), "--itl-ms", "2", "--reasoning-tokens", "8",
             "--content-ms", str(FIRST_CONTENT_MS), "--reasoning-field", field]  # fmt: skip
    with fake_server(*flags) as server:
        out = tmp / field
        subprocess.run(
            [sys.executable, "-m", "loadgen", "--target", server.url, "--profile", "steady",
             "--out", str(out), "--duration", str(duration), "--rate", str(rate),
             "--set", "output_tokens=16", "--set", "warmup_seconds=0"],
            cwd=REPO, check=True, capture_output=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        stats = fake_stats(server)
    ttft, n = _median_ms(out, "ttft")
    ttfc, _ = _median_ms(out, "ttfc")
    return {
        "field": field,
        "requests": n,
        "ttft_ms": ttft,
        "ttfc_ms": ttfc,
        "server_first_reasoning_ms": 1000.0 * statistics.median(stats["first_reasoning_seconds"]),
        "server_first_content_ms": 1000.0 * statistics.median(stats["first_content_seconds"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=8.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        points = [point(f, Path(tmp), args.duration, args.rate)
                  for f in ("reasoning_content", "reasoning")]  # fmt: skip
    rows = []
    for p in points:
        for metric, injected, server in (
            ("ttft", FIRST_REASONING_MS, p["server_first_reasoning_ms"]),
            ("ttfc", FIRST_CONTENT_MS, p["server_first_content_ms"]),
        ):
            value = p[f"{metric}_ms"]
            rows.append([p["field"], metric, p["requests"], f"{injected:.1f}", f"{server:.2f}",
                         f"{value:.2f}", f"{value - injected:+.2f}"])  # fmt: skip
    print_table(
        ["reasoning field", "metric", "n", "injected ms", "server median ms",
         "client median ms", "client - injected ms"],
        rows,
    )  # fmt: skip
    injected = {"first_reasoning": FIRST_REASONING_MS, "first_content": FIRST_CONTENT_MS}
    write_result(RESULTS, {"injected_ms": injected, "points": points})
    return 0


if __name__ == "__main__":
    sys.exit(main())
