"""Complete synthetic run directories (docs/records.md) for report and compare tests.

`make_run` writes manifest.json and, per profile, requests.jsonl, load.json, steps.jsonl,
scrapes.jsonl and gpu.jsonl with every field the contract names, from a seeded generator: a
`burst` profile (baseline / spike / recovery stages, two priority classes, two length classes,
slower TTFT and a queue during the spike) and a flat `steady` profile. Knobs scale latency,
inject errors, or leave the observer files out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

WALL0 = 1_764_400_000.0
MONO0 = 1000.0
STEP_SECONDS = 0.05
SCRAPE_SECONDS = 0.5
BUCKETS = ("0.005", "0.01", "0.02", "0.05", "0.1", "+Inf")


@dataclass(frozen=True, kw_only=True)
class Stage:
    name: str
    start_seconds: float
    end_seconds: float
    rate_rps: float
    ttft_seconds: float  # median TTFT of requests sent in this stage


PROFILES: dict[str, tuple[Stage, ...]] = {
    "burst": (
        Stage(name="baseline", start_seconds=0, end_seconds=6, rate_rps=12, ttft_seconds=0.04),
        Stage(name="spike", start_seconds=6, end_seconds=10, rate_rps=45, ttft_seconds=0.25),
        Stage(name="recovery", start_seconds=10, end_seconds=18, rate_rps=12, ttft_seconds=0.05),
    ),
    "steady": (
        Stage(name="main", start_seconds=0.0, end_seconds=15.0, rate_rps=30.0, ttft_seconds=0.05),
    ),
}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _stage_at(stages: Sequence[Stage], t: float) -> Stage:
    return next((s for s in stages if s.start_seconds <= t < s.end_seconds), stages[-1])


def _requests(
    name: str,
    stages: Sequence[Stage],
    rng: np.random.Generator,
    *,
    ttft_scale: float,
    error_share: float,
) -> list[dict[str, Any]]:
    records = []
    for stage in stages:
        count = int(stage.rate_rps * (stage.end_seconds - stage.start_seconds))
        planned = np.sort(rng.uniform(stage.start_seconds, stage.end_seconds, count))
        for offset in planned:
            i = len(records)
            batch = rng.random() < 0.3
            long = rng.random() < 0.2
            tokens = 32 if long else 8
            planned_at = MONO0 + float(offset)
            sent_at = planned_at + float(rng.uniform(0.0001, 0.001))
            ttft = stage.ttft_seconds * ttft_scale * float(rng.lognormal(0.0, 0.3))
            ttft *= 1.6 if batch else 1.0
            failed = rng.random() < error_share
            first = sent_at + ttft
            times = [
                round(first + j * 0.02 * float(rng.uniform(0.8, 1.2)) * ttft_scale + j * 1e-6, 6)
                for j in range(tokens)
            ]
            times = sorted(times)
            records.append({
                "id": f"0-{i}", "profile": name, "stage": stage.name,
                "priority": "batch" if batch else "interactive",
                "length_class": "long" if long else "short", "endpoint": "chat", "stream": True,
                "max_tokens": tokens, "planned_at": planned_at, "sent_at": sent_at,
                "first_token_at": None if failed else first,
                "done_at": sent_at + 0.01 if failed else times[-1] + 0.001,
                "chunk_times": [] if failed else times,
                "chunk_tokens": [] if failed else [1] * tokens,
                "prompt_tokens": 64, "output_tokens": None if failed else tokens,
                "tokens_source": "usage", "status": "http_error" if failed else "ok",
                "http_status": 503 if failed else 200,
                "finish_reason": None if failed else "length",
                "error": "server overloaded" if failed else None, "worker": 0,
            })
    return records


def _observers(
    stages: Sequence[Stage], rng: np.random.Generator, *, ttft_scale: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    end = stages[-1].end_seconds + 1.0
    steps, scrapes, gpu = [], [], []
    buckets = dict.fromkeys(BUCKETS, 0)
    total_sum, count, recomputed, prefill = 0.0, 0, 0, 0
    for seq, t in enumerate(np.arange(0.0, end, STEP_SECONDS)):
        stage = _stage_at(stages, float(t))
        busy = stage.ttft_seconds / 0.05  # 1 at the base rate, 5 in a spike
        duration = 0.008 * ttft_scale * busy**0.5 * float(rng.lognormal(0.0, 0.2))
        waiting = {
            "interactive": int(busy - 1 + rng.integers(0, 2)),
            "batch": int(2 * busy - 2 + rng.integers(0, 3)),
        }
        used = min(int(20 * busy + rng.integers(0, 5)), 128)
        recompute = int(rng.integers(0, 20)) if busy > 2 else 0
        steps.append({
            "seq": seq, "t": WALL0 + float(t), "duration_seconds": duration,
            "forward_seconds": duration * 0.8, "policy": "continuous", "num_seqs": 4,
            "num_prefill_tokens": 64, "num_decode_tokens": 4, "num_kv_blocks_used": used,
            "num_kv_blocks_total": 128, "num_preemptions": 1 if recompute else 0,
            "num_recomputed_tokens": recompute, "num_waiting": waiting,
            "num_running": {"interactive": 2, "batch": 1},
        })
        recomputed, prefill = recomputed + recompute, prefill + 64
        for le in BUCKETS:
            if le == "+Inf" or duration <= float(le):
                buckets[le] += 1
        total_sum, count = total_sum + duration, count + 1
        if (seq + 1) % round(SCRAPE_SECONDS / STEP_SECONDS) == 0:
            scrapes.append({
                "t": WALL0 + float(t), "phase": "start" if not scrapes else "poll", "ok": True,
                "error": None, "server_kind": "batchgate",
                "metrics": {"kv_usage_ratio": used / 128, "kv_blocks_used": used,
                            "kv_blocks_total": 128, "num_requests_waiting": waiting,
                            "num_requests_running": {"interactive": 2, "batch": 1},
                            "recomputed_tokens_total": recomputed, "prefill_tokens_total": prefill,
                            "step_duration_seconds": {"buckets": dict(buckets), "sum": total_sum,
                                                      "count": count}},
                "unavailable": ["device_memory_used_bytes"],
            })
            gpu.append({
                "t": WALL0 + float(t), "source": "process_rss", "device": None,
                "memory_used_bytes": int(400e6 + 50e6 * busy + rng.integers(0, 5e6)),
                "memory_total_bytes": None, "utilization_ratio": None, "power_watts": None,
                "process_memory_bytes": None, "note": "no NVML on this machine",
            })
    scrapes[-1]["phase"] = "end"
    drain = {**scrapes[-1], "t": WALL0 + end + 0.5, "phase": "drain"}
    drain["metrics"] = {**drain["metrics"], "kv_blocks_used": 0, "kv_usage_ratio": 0.0}
    scrapes.append(drain)
    return steps, scrapes, gpu


def _load_json(
    name: str, stages: Sequence[Stage], records: list[dict[str, Any]], warmup_seconds: float
) -> dict[str, Any]:
    span = stages[-1].end_seconds
    counts: dict[str, int] = {}
    for record in records:
        counts[record["status"]] = counts.get(record["status"], 0) + 1
    params = {"stages": [s.name for s in stages], "rates": [s.rate_rps for s in stages]}
    return {
        "schema_version": 1, "profile": name, "params": params, "params_hash": f"hash-{name}",
        "mode": "open", "workers": 1,
        "clock": {"monotonic_at_start": MONO0, "wall_at_start": WALL0},
        "window": {"start": MONO0, "end": MONO0 + span, "warmup_seconds": warmup_seconds},
        "stages": [{"name": s.name, "start": MONO0 + s.start_seconds, "end": MONO0 + s.end_seconds}
                   for s in stages],
        "target_rate_rps": len(records) / span, "achieved_rate_rps": len(records) / span,
        "planned_requests": len(records), "sent_requests": len(records),
        "counts_by_status": counts,
        "schedule_lag_seconds": {"p50": 0.0005, "p90": 0.0008, "p99": 0.001, "max": 0.002},
        "client_cpu_ratio": {"mean": 0.1, "max": 0.2}, "concurrency_cap": 256,
        "cap_reached_count": 0,
        "limits": {"max_schedule_lag_p99_seconds": 0.05, "max_client_cpu_ratio": 0.9},
        "measurement_valid": True, "invalid_reasons": [], "ended": "completed",
    }


def make_run(
    root: Path,
    *,
    profiles: Sequence[str] = ("burst", "steady"),
    seed: int = 0,
    ttft_scale: float = 1.0,
    error_share: float = 0.0,
    observers: bool = True,
    warmup_seconds: float = 1.0,
    batching: dict[str, Any] | None = None,
) -> Path:
    """Write a complete run directory at `root` and return it."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name in profiles:
        stages = PROFILES[name]
        directory = root / name
        directory.mkdir()
        records = _requests(name, stages, rng, ttft_scale=ttft_scale, error_share=error_share)
        load = _load_json(name, stages, records, warmup_seconds)
        _write_jsonl(directory / "requests.jsonl", records)
        (directory / "load.json").write_text(json.dumps(load), encoding="utf-8")
        if observers:
            steps, scrapes, gpu = _observers(stages, rng, ttft_scale=ttft_scale)
            _write_jsonl(directory / "steps.jsonl", steps)
            _write_jsonl(directory / "scrapes.jsonl", scrapes)
            _write_jsonl(directory / "gpu.jsonl", gpu)
        entries[name] = {"params": load["params"], "params_hash": load["params_hash"]}
    manifest = {
        "schema_version": 1, "tool": {"version": "0.1.0", "git_sha": "0123abc"},
        "target": {"url": "http://127.0.0.1:8000", "server_kind": "batchgate", "model": "tiny",
                   "batching": batching or {"policy": "continuous", "max_num_seqs": 16},
                   "batching_hash": "bh-1"},
        "hardware": {"cpu": "synthetic-cpu", "cpu_count": 2, "gpu": None, "driver": None},
        "profiles": entries, "gates_file": None, "gates_hash": None,
        "started_at": "2026-11-29T08:00:00Z", "ended_at": "2026-11-29T08:01:00Z",
        "scale": "smoke", "preset": None, "ended": "completed", "reason": None,
    }
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


GATES_YAML = """\
version: 1
presets:
  safe:
    policy: continuous
    max_num_seqs: 8
gates:
  - name: ttft_p99
    metric: ttft
    statistic: p99
    fail: "< 2s"
  - name: interactive_spike_ttft
    metric: ttft
    statistic: p99
    scope: {profile: burst, stage: spike, priority: interactive}
    fail: "< 50ms"
    knob: max_num_seqs
    rollback: safe
  - name: error_rate
    metric: errors
    statistic: mean
    fail: "< 5%"
"""
