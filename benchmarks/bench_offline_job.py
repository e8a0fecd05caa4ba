"""Benchmark: a big Batch API job beside steady chat traffic on the bundled server.

Runs `batchgate run --profile offline_job` (the real load generator, the real server, its
calibration first) with the packaged default gates' `offline_job` profile scaled up: a job of
`--lines` short lines (the calibration's short mix) submitted part-way through chat at
`--chat-share` x the calibrated capacity, the chat long enough to span the job (the remaining
capacity serves the job: chat requests during the job = lines x share / (1 - share)). Then it
reads the run's own files:
  - chat TTFT p50 / p90 / p99 before the job and while it runs (requests.jsonl, by stage) and
    the p99 ratio (target: <= 2x);
  - the job: status, lines completed / failed, seconds, output tokens/s, and that rate as a
    fraction of the calibrated capacity (load.json `batch_job`, calibration.json);
  - the run's verdicts on the default offline_job gates (exit code).
Prints a table and writes benchmarks/results/offline_job.json.

    .venv/bin/python -m benchmarks.bench_offline_job [--lines 10000] [--chat-share 0.3]
        [--preset NAME | --cap N|none] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, write_result

RESULTS = RESULTS_DIR / "offline_job.json"
SUBMIT_AT = 0.4  # share of the chat schedule before the job is submitted


def gates_text(lines: int, share: float, cap: str | None) -> str:
    """The packaged default gates, only the offline_job part, sized for `lines`; with `cap`,
    a preset `bench_cap` that sets batch_max_running_with_interactive (an int or none)."""
    packaged = resources.files("gate.gates").joinpath("default.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(packaged)
    profile = data["profiles"]["offline_job"]
    during = lines * share / (1.0 - share)
    profile.update(
        {
            "base_rate_rps": f"{share}x capacity",
            "main_seconds": f"{round(during / (1.0 - SUBMIT_AT))} requests",
            "job_submit_at_ratio": SUBMIT_AT,
            "job_lines": lines,
            "job_wait_seconds": 1800,
        }
    )
    data["profiles"] = {"offline_job": profile}
    if cap is not None:
        value = None if cap == "none" else int(cap)
        data["presets"]["bench_cap"] = {"batch_max_running_with_interactive": value}
    keep = {"chat_during_offline_job", "offline_job_throughput", "offline_job_completed"}
    data["gates"] = [g for g in data["gates"] if g["name"] in keep or "scope" not in g]
    data["gates"].append(
        {
            "name": "chat_p99_during_offline_job",
            "metric": "ttft",
            "statistic": "p99",
            "scope": {"profile": "offline_job", "stage": "during_job"},
            "relative_to": {"scope": {"stage": "before_job"}},
            "fail": "< 2x",
        }
    )
    return yaml.safe_dump(data, sort_keys=False)


def stage_ttft(path: Path) -> dict[str, dict[str, float]]:
    by_stage: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    with path.open(encoding="utf-8") as records:
        for line in records:
            record = json.loads(line)
            stage = record["stage"]
            if record["status"] != "ok" or record["first_token_at"] is None:
                errors[stage] = errors.get(stage, 0) + 1
                continue
            by_stage.setdefault(stage, []).append(record["first_token_at"] - record["sent_at"])
    out = {}
    for stage, values in by_stage.items():
        array = np.array(values)
        out[stage] = {
            "n": len(values),
            "errors": errors.get(stage, 0),
            **{f"p{q}": float(np.percentile(array, q)) for q in (50, 90, 99)},
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000, help="lines in the job")
    parser.add_argument("--chat-share", type=float, default=0.3, help="chat rate, x capacity")
    parser.add_argument("--preset", default=None, help="run under this preset (e.g. safe)")
    parser.add_argument(
        "--cap",
        default=None,
        help="batch_max_running_with_interactive for this run (an integer or none; default: "
        "the server's)",
    )
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--keep", default=None, help="keep the run under this directory")
    args = parser.parse_args()
    if not 0.0 < args.chat_share < 1.0:
        parser.error("--chat-share must be within (0, 1)")
    if args.preset and args.cap is not None:
        parser.error("--cap and --preset exclude each other")
    if args.cap not in (None, "none") and not args.cap.isdigit():
        parser.error("--cap must be an integer >= 1 or none")
    place = (
        contextlib.nullcontext(args.keep)
        if args.keep
        else tempfile.TemporaryDirectory(prefix="bench-offline-job-")
    )
    with place as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        gates = Path(tmp) / "gates.yaml"
        gates.write_text(gates_text(args.lines, args.chat_share, args.cap), encoding="utf-8")
        argv = [sys.executable, "-m", "gate.cli", "run", "--gates", str(gates)]
        argv += ["--profile", "offline_job", "--scale", "full", "--out", tmp, "--run-id", "job"]
        if args.preset or args.cap is not None:
            argv += ["--preset", args.preset or "bench_cap"]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        run_dir = Path(tmp) / "job"
        if not (run_dir / "offline_job" / "load.json").is_file():
            print(done.stdout[-3000:] + done.stderr[-3000:])
            print(f"batchgate run exited {done.returncode} without a profile")
            return 1
        load = json.loads((run_dir / "offline_job" / "load.json").read_text())
        calibration = json.loads((run_dir / "calibration.json").read_text())
        verdicts = json.loads((run_dir / "verdicts.json").read_text())
        stages = stage_ttft(run_dir / "offline_job" / "requests.jsonl")
    job = load.get("batch_job") or {}
    capacity = calibration["capacity"]["short"]
    tokens_per_second = (
        job["output_tokens"] / job["duration_seconds"]
        if job.get("output_tokens") and job.get("duration_seconds")
        else None
    )
    before, during = stages.get("before_job", {}), stages.get("during_job", {})
    ratio = during["p99"] / before["p99"] if before.get("p99") and during.get("p99") else None
    result: dict[str, Any] = {
        "lines": args.lines,
        "chat_share": args.chat_share,
        "preset": args.preset,
        "cap": args.cap,
        "exit_code": done.returncode,
        "run_seconds": round(took, 1),
        "capacity": capacity,
        "chat_rate_rps": load.get("target_rate_rps"),
        "chat_ttft": stages,
        "chat_ttft_p99_ratio": ratio,
        "job": {k: job.get(k) for k in ("status", "lines_total", "lines_completed",
                                        "lines_failed", "output_tokens", "duration_seconds")},
        "job_output_tokens_per_second": tokens_per_second,
        "job_share_of_capacity": (
            tokens_per_second / capacity["output_tokens_per_second"] if tokens_per_second else None
        ),
        "verdicts": {v["gate"]: [v["status"], v.get("value")] for v in verdicts["verdicts"]},
    }  # fmt: skip
    print(f"offline job: {args.lines} lines, chat at {args.chat_share}x capacity "
          f"({capacity['rps']:.1f} req/s, {capacity['output_tokens_per_second']:.0f} tok/s "
          f"calibrated); run {took:.0f} s, exit {done.returncode}")  # fmt: skip
    print(f"{'chat stage':<12} {'n':>6} {'errors':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for name in ("before_job", "during_job"):
        s = stages.get(name)
        if s:
            print(f"{name:<12} {s['n']:>6} {s['errors']:>6} {s['p50'] * 1e3:>8.1f} "
                  f"{s['p90'] * 1e3:>8.1f} {s['p99'] * 1e3:>8.1f}")  # fmt: skip
    print(f"chat TTFT p99 during / before: {ratio:.2f} (target <= 2)" if ratio else "no ratio")
    print(f"job: {job.get('status')}, {job.get('lines_completed')}/{job.get('lines_total')} lines, "
          f"{job.get('lines_failed')} failed, {job.get('duration_seconds') or 0:.1f} s, "
          f"{tokens_per_second or 0:.0f} tok/s = "
          f"{result['job_share_of_capacity'] or 0:.2f}x capacity")  # fmt: skip
    for gate, (status, value) in result["verdicts"].items():
        print(f"  {gate:<45} {status:<12} {value}")
    write_result(args.output, result)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
