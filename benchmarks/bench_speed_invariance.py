"""Benchmark: the default gates give the same verdict whatever the machine's speed.

Runs `batchgate run --scale smoke` with the packaged default gates for the default settings and
each failure preset (each preset only with the profiles its gate needs, like
tests/e2e/test_presets_fail.py), under three conditions, several times per cell:
  idle   the machine as it is;
  busy   one core taken by a busy-looping process for the whole run;
  slow   the bundled server on the `medium` model preset (3x or more below idle tiny: the
         table's slowdown rows say by how much in this run, from each run's calibration);
  slowbusy  both: the medium preset with one core taken.
Prints one row per cell — the exit codes, and the gate each setting exists to show with its
value, threshold and margin per run — and writes benchmarks/results/speed_invariance.json.
The claim it checks: the default passes every run; each preset fails its own gate every run,
never by `inconclusive`.

    .venv/bin/python -m benchmarks.bench_speed_invariance [--runs 3] [--conditions idle,busy,slow]
        [--settings default,big_window,static,small_kv,shared_queue,jobs_interactive,starved_job,
                    no_prefix_cache,no_prefix_cache_sessions,thrash_cache,
                    align_sampling_strict,shared_sampler_seed]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "speed_invariance.json"

# setting -> (preset flag args, profiles, the gate it must fail or, for default, None)
SETTINGS: dict[str, tuple[list[str], str | None, str | None]] = {
    "default": ([], None, None),
    "big_window": (["--preset", "big_window"], "night_trickle", "trickle_ttft@night_trickle"),
    "static": (["--preset", "static"], "mixed_lengths", "mixed_short_e2e@mixed_lengths"),
    "small_kv": (["--preset", "small_kv"], "burst", "burst_recompute_ratio@burst"),
    "shared_queue": (
        ["--preset", "shared_queue"],
        "priority_mix",
        "priority_precedence@priority_mix",
    ),
    "jobs_interactive": (
        ["--preset", "jobs_interactive"],
        "offline_job",
        "chat_during_offline_job@offline_job",
    ),
    "starved_job": (
        ["--preset", "starved_job"],
        "offline_job",
        "offline_job_throughput@offline_job",
    ),
    "no_prefix_cache": (["--preset", "no_prefix_cache"], "trace", "prefix_cache_hit_ratio@trace"),
    "no_prefix_cache_sessions": (
        ["--preset", "no_prefix_cache"],
        "chat_sessions",
        "session_prefix_reuse@chat_sessions",
    ),
    "thrash_cache": (
        ["--preset", "thrash_cache"],
        "chat_sessions",
        "session_prefix_reuse@chat_sessions",
    ),
    "align_sampling_strict": (
        ["--preset", "align_sampling_strict"],
        "sampling_mix",
        "mixed_sampling_throughput@sampling_mix",
    ),
    "shared_sampler_seed": (
        ["--preset", "shared_sampler_seed"],
        "sampling_mix",
        "answer_consistency@sampling_mix",
    ),
}
KEY_GATES = (
    "trickle_ttft@night_trickle",
    "mixed_short_e2e@mixed_lengths",
    "burst_recompute_ratio@burst",
    "priority_precedence@priority_mix",
    "chat_during_offline_job@offline_job",
    "offline_job_throughput@offline_job",
    "prefix_cache_hit_ratio@trace",
    "session_prefix_reuse@chat_sessions",
    "mixed_sampling_throughput@sampling_mix",
    "answer_consistency@sampling_mix",
)


@contextlib.contextmanager
def condition(name: str) -> Iterator[list[str]]:
    """Extra `batchgate run` arguments for the condition, with its side effect around it."""
    slow = ["--server-arg=--model", "--server-arg=medium"]
    if name in ("busy", "slowbusy"):
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            yield slow if name == "slowbusy" else []
        finally:
            busy.kill()
            busy.wait()
    elif name == "slow":
        yield slow
    else:
        yield []


def one_run(out: Path, run_id: str, args: list[str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "gate.cli", "run", "--scale", "smoke", "--out", str(out)]
    started = time.monotonic()
    done = subprocess.run(
        [*argv, "--run-id", run_id, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    run_dir = out / run_id
    verdicts: dict[str, Any] = {}
    path = run_dir / "verdicts.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        verdicts = {
            v["id"]: {
                "status": v["status"],
                "value": v.get("value"),
                "threshold": v.get("threshold"),
                "threshold_value": v.get("threshold_value"),
                "margin": v.get("margin"),
            }
            for v in data["verdicts"]
        }
    calibration = {}
    cal_path = run_dir / "calibration.json"
    if cal_path.is_file():
        cal = json.loads(cal_path.read_text(encoding="utf-8"))
        calibration = {
            "unloaded_ttft_p50": cal["unloaded"]["short"]["ttft"]["p50"],
            "unloaded_e2e_p50": cal["unloaded"]["short"]["e2e"]["p50"],
            "capacity_rps": cal["capacity"]["short"]["rps"],
            "took_seconds": cal.get("took_seconds"),
        }
    return {
        "exit_code": done.returncode,
        "seconds": round(seconds, 1),
        "verdicts": verdicts,
        "calibration": calibration,
        "stderr_tail": done.stderr[-400:] if done.returncode not in (0, 1) else "",
    }


def expected(setting: str, run: dict[str, Any]) -> bool:
    gate = SETTINGS[setting][2]
    if gate is None:
        return run["exit_code"] == 0
    return run["exit_code"] == 1 and run["verdicts"].get(gate, {}).get("status") == "fail"


def shown(setting: str, run: dict[str, Any]) -> str:
    gates = KEY_GATES if SETTINGS[setting][2] is None else (SETTINGS[setting][2],)
    parts = []
    for gate in gates:
        v = run["verdicts"].get(gate)
        if v is None:
            continue
        value, limit = v.get("value"), v.get("threshold_value")
        text = f"{gate.split('@')[0]} {v['status']}"
        if isinstance(value, (int, float)) and isinstance(limit, (int, float)) and limit:
            text += f" {value:.3g}/{limit:.3g}"
        parts.append(text)
    return "; ".join(parts)


def slowdowns(cells: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per condition, how much slower the target was than idle: the median calibrated capacity
    (short requests/s) and unloaded short-request e2e p50 of its runs against idle's. The
    calibration runs on the reference settings whatever the preset, so every run counts."""

    def median_of(cond: str, key: str) -> float | None:
        values = [r["calibration"][key] for c in cells if c["condition"] == cond
                  for r in c["runs"] if r["calibration"].get(key)]  # fmt: skip
        return statistics.median(values) if values else None

    idle_capacity, idle_e2e = (
        median_of("idle", "capacity_rps"),
        median_of("idle", "unloaded_e2e_p50"),
    )
    out = {}
    for cond in dict.fromkeys(c["condition"] for c in cells):
        capacity, e2e = median_of(cond, "capacity_rps"), median_of(cond, "unloaded_e2e_p50")
        if cond != "idle" and None not in (idle_capacity, idle_e2e, capacity, e2e):
            out[cond] = {"capacity": idle_capacity / capacity, "unloaded_e2e": e2e / idle_e2e}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conditions", default="idle,busy,slow")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    args = parser.parse_args()
    conditions = args.conditions.split(",")
    settings = args.settings.split(",")
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bg-invariance-") as tmp:
        out = Path(tmp)
        for cond in conditions:
            for setting in settings:
                flags, profiles, _ = SETTINGS[setting]
                runs = []
                for i in range(args.runs):
                    with condition(cond) as extra:
                        run_args = [*flags, *extra]
                        if profiles:
                            run_args += ["--profile", profiles]
                        runs.append(one_run(out, f"{cond}-{setting}-{i}", run_args))
                    r = runs[-1]
                    print(
                        f"{cond:5} {setting:12} run {i + 1}: exit {r['exit_code']} "
                        f"{r['seconds']:.0f}s  {shown(setting, r)}",
                        flush=True,
                    )
                cells.append(
                    {
                        "condition": cond,
                        "setting": setting,
                        "runs": runs,
                        "as_expected": all(expected(setting, r) for r in runs),
                    }
                )
    print()
    print(f"{'condition':9} {'setting':12} {'exits':10} {'as expected':11} key gate per run")
    for cell in cells:
        exits = ",".join(str(r["exit_code"]) for r in cell["runs"])
        per_run = " | ".join(shown(cell["setting"], r) for r in cell["runs"])
        ok = "yes" if cell["as_expected"] else "NO"
        print(f"{cell['condition']:9} {cell['setting']:12} {exits:10} {ok:11} {per_run}")
    slowdown = slowdowns(cells)
    if slowdown:
        print("\nslowdown against idle (median over the condition's runs' calibrations):")
        for cond, row in slowdown.items():
            print(f"  {cond:9} capacity {row['capacity']:.2f}x lower, "
                  f"unloaded short e2e {row['unloaded_e2e']:.2f}x longer")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"cells": cells, "slowdown_vs_idle": slowdown}, indent=2) + "\n",
        encoding="utf-8",
    )
    print(f"\nwrote {RESULTS}")
    return 0 if all(c["as_expected"] for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
