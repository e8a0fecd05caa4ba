"""Synthetic run directories (docs/records.md formats) for the gate's tests.

Primitives build hand-made runs with known distributions: `request_records` and `step_records`
make rows, `write_jsonl` writes any JSONL file, `load_json` / `write_profile` / `write_manifest`
write the files around them. `make_run` builds a complete, realistic run from a seeded generator
with every field the contract names: a `burst` profile (baseline / spike / recovery stages, two
priority classes, two length classes, slower TTFT and a queue during the spike) and a flat
`steady` profile; knobs scale latency, inject errors, or leave the observer files out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

WALL0 = 1_764_400_000.0
MONO0 = 1000.0

# Primitives: rows, and the files of one profile and of the run.


def write_jsonl(
    path: Path, rows: Sequence[Mapping[str, Any]], *, partial_tail: bool = False
) -> None:
    """One JSON object a line; `partial_tail` adds a cut-off last line like a killed writer's."""
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    path.write_bytes(data + (b'{"id": "cut-off", "planned_' if partial_tail else b""))


def request_records(
    n: int,
    *,
    profile: str = "steady",
    ttft_seconds: Sequence[float] | np.ndarray | None = None,
    itl_seconds: float = 0.02,
    chunks: int = 8,
    start: float = MONO0,
    spacing_seconds: float = 0.01,
    stage: str | Sequence[str] = "main",
    priority: str | Sequence[str] = "interactive",
    length_class: str = "short",
    status: str | Sequence[str] = "ok",
    http_status: int | Sequence[int] = 200,
) -> list[dict[str, Any]]:
    """`n` evenly spaced streamed requests; a per-request value may be given as a sequence."""
    ttfts = np.full(n, 0.1) if ttft_seconds is None else np.asarray(ttft_seconds, dtype=float)
    records = []
    for i in range(n):
        planned = start + i * spacing_seconds
        sent = planned + 0.0005
        first = sent + float(ttfts[i])
        times = [round(first + j * itl_seconds, 6) for j in range(chunks)]
        st = status if isinstance(status, str) else status[i]
        records.append(
            {
                "id": f"0-{i}",
                "profile": profile,
                "stage": stage if isinstance(stage, str) else stage[i],
                "priority": priority if isinstance(priority, str) else priority[i],
                "length_class": length_class,
                "endpoint": "chat",
                "stream": True,
                "max_tokens": chunks,
                "planned_at": planned,
                "sent_at": sent,
                "first_token_at": first if st == "ok" else None,
                "done_at": times[-1] + 0.001,
                "chunk_times": times if st == "ok" else [],
                "chunk_tokens": [1] * chunks if st == "ok" else [],
                "chunk_tokens_source": "usage",
                "prompt_tokens": 100,
                "output_tokens": chunks if st == "ok" else None,
                "tokens_source": "usage",
                "status": st,
                "http_status": http_status if isinstance(http_status, int) else http_status[i],
                "finish_reason": "length",
                "error": None if st == "ok" else "boom",
                "worker": 0,
            }
        )
    return records


def step_records(
    durations: Sequence[float], *, t0: float = WALL0, used: int = 10, total: int = 100
) -> list[dict[str, Any]]:
    return [
        {
            "seq": i,
            "t": t0 + i * 0.01,
            "duration_seconds": float(d),
            "forward_seconds": float(d) * 0.9,
            "policy": "continuous",
            "num_seqs": 4,
            "num_prefill_tokens": 100,
            "num_decode_tokens": 4,
            "num_kv_blocks_used": used,
            "num_kv_blocks_total": total,
            "num_preemptions": 0,
            "num_recomputed_tokens": 0,
            "num_waiting": {"interactive": 1, "batch": 2},
            "num_running": {"interactive": 2, "batch": 2},
        }
        for i, d in enumerate(durations)
    ]


def load_json(
    profile: str,
    records: Sequence[Mapping[str, Any]],
    *,
    window: tuple[float, float] | None = None,
    stages: list[dict[str, Any]] | None = None,
    params: dict[str, Any] | None = None,
    params_hash: str = "p" * 8,
    warmup_seconds: float = 0.0,
    measurement_valid: bool = True,
    ended: str = "completed",
) -> dict[str, Any]:
    """load.json of a profile; the window defaults to the span of the records' planned times."""
    if window is None:
        planned = [r["planned_at"] for r in records]
        window = (min(planned), max(planned)) if planned else (MONO0, MONO0 + 1)
    start, end = window
    rate = len(records) / (end - start) if end > start else float(len(records))
    return {
        "schema_version": 1,
        "profile": profile,
        "params": params if params is not None else {"rate": 100},
        "params_hash": params_hash,
        "mode": "open",
        "workers": 1,
        "clock": {"monotonic_at_start": MONO0, "wall_at_start": WALL0},
        "window": {"start": start, "end": end, "warmup_seconds": warmup_seconds},
        "stages": stages or [{"name": "main", "start": start, "end": end}],
        "target_rate_rps": rate,
        "achieved_rate_rps": rate,
        "planned_requests": len(records),
        "sent_requests": len(records),
        "counts_by_status": dict(Counter(r["status"] for r in records)),
        "chunk_tokens_sources": dict(
            Counter(r.get("chunk_tokens_source", "assumed") for r in records if r["chunk_times"])
        ),
        "schedule_lag_seconds": {"p50": 0.0005, "p90": 0.0008, "p99": 0.001, "max": 0.002},
        "client_cpu_ratio": {"mean": 0.1, "max": 0.2},
        "concurrency_cap": 256,
        "cap_reached_count": 0,
        "limits": {"max_schedule_lag_p99_seconds": 0.05, "max_client_cpu_ratio": 0.9},
        "measurement_valid": measurement_valid,
        "invalid_reasons": [] if measurement_valid else ["schedule lag p99 0.2s > 0.05s"],
        "ended": ended,
    }


def write_profile(
    run_dir: Path,
    profile: str,
    records: Sequence[Mapping[str, Any]],
    *,
    steps: Sequence[Mapping[str, Any]] | None = None,
    scrapes: Sequence[Mapping[str, Any]] | None = None,
    gpu: Sequence[Mapping[str, Any]] | None = None,
    **load_kwargs: Any,
) -> Path:
    """A profile directory: requests.jsonl, load.json (`load_kwargs` go to `load_json`) and
    whichever observer files are given. Returns the directory."""
    directory = run_dir / profile
    directory.mkdir(parents=True, exist_ok=True)
    write_jsonl(directory / "requests.jsonl", records)
    load = load_json(profile, records, **load_kwargs)
    (directory / "load.json").write_text(json.dumps(load), encoding="utf-8")
    for name, rows in (("steps", steps), ("scrapes", scrapes), ("gpu", gpu)):
        if rows is not None:
            write_jsonl(directory / f"{name}.jsonl", rows)
    return directory


def write_manifest(
    run_dir: Path,
    profiles: Sequence[str] | Mapping[str, Mapping[str, Any]],
    *,
    ended: str = "completed",
    model: str = "tiny",
    batching: Mapping[str, Any] | None = None,
) -> None:
    """manifest.json; `profiles` maps each name to its params entry, or just names them."""
    if not isinstance(profiles, Mapping):
        profiles = {p: {"params": {"rate": 100}, "params_hash": "p" * 8} for p in profiles}
    manifest = {
        "schema_version": 1,
        "tool": {"version": "0.1.0", "git_sha": "0123abc"},
        "target": {
            "url": "http://127.0.0.1:8000",
            "server_kind": "batchgate",
            "model": model,
            "batching": dict(batching or {"policy": "continuous", "max_num_seqs": 16}),
            "batching_hash": "bh-1",
        },
        "hardware": {"cpu": "synthetic-cpu", "cpu_count": 2, "gpu": None, "driver": None},
        "profiles": dict(profiles),
        "gates_file": None,
        "gates_hash": None,
        "started_at": "2026-11-29T08:00:00Z",
        "ended_at": "2026-11-29T08:01:00Z",
        "scale": "smoke",
        "preset": None,
        "ended": ended,
        "reason": None if ended == "completed" else "target exited with code -9",
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def write_gates(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# A whole realistic run: make_run.

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


def _stage_at(stages: Sequence[Stage], t: float) -> Stage:
    return next((s for s in stages if s.start_seconds <= t < s.end_seconds), stages[-1])


def _seeded_requests(
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
            batch = rng.random() < 0.3
            long = rng.random() < 0.2
            tokens = 32 if long else 8
            planned_at = MONO0 + float(offset)
            sent_at = planned_at + float(rng.uniform(0.0001, 0.001))
            ttft = stage.ttft_seconds * ttft_scale * float(rng.lognormal(0.0, 0.3))
            ttft *= 1.6 if batch else 1.0
            failed = rng.random() < error_share
            first = sent_at + ttft
            times = sorted(
                round(first + j * 0.02 * float(rng.uniform(0.8, 1.2)) * ttft_scale + j * 1e-6, 6)
                for j in range(tokens)
            )
            records.append(
                {
                    "id": f"0-{len(records)}",
                    "profile": name,
                    "stage": stage.name,
                    "priority": "batch" if batch else "interactive",
                    "length_class": "long" if long else "short",
                    "endpoint": "chat",
                    "stream": True,
                    "max_tokens": tokens,
                    "planned_at": planned_at,
                    "sent_at": sent_at,
                    "first_token_at": None if failed else first,
                    "done_at": sent_at + 0.01 if failed else times[-1] + 0.001,
                    "chunk_times": [] if failed else times,
                    "chunk_tokens": [] if failed else [1] * tokens,
                    "chunk_tokens_source": "usage",
                    "prompt_tokens": 64,
                    "output_tokens": None if failed else tokens,
                    "tokens_source": "usage",
                    "status": "http_error" if failed else "ok",
                    "http_status": 503 if failed else 200,
                    "finish_reason": None if failed else "length",
                    "error": "server overloaded" if failed else None,
                    "worker": 0,
                }
            )
    return records


def _seeded_observers(
    stages: Sequence[Stage], rng: np.random.Generator, *, ttft_scale: float
) -> dict[str, list[dict[str, Any]]]:
    end = stages[-1].end_seconds + 1.0
    steps, scrapes, gpu = [], [], []
    buckets = dict.fromkeys(BUCKETS, 0)
    total_sum, count, recomputed, prefill = 0.0, 0, 0, 0
    for seq, t in enumerate(np.arange(0.0, end, STEP_SECONDS)):
        busy = _stage_at(stages, float(t)).ttft_seconds / 0.05  # 1 at the base rate, 5 in a spike
        duration = 0.008 * ttft_scale * busy**0.5 * float(rng.lognormal(0.0, 0.2))
        waiting = {
            "interactive": int(busy - 1 + rng.integers(0, 2)),
            "batch": int(2 * busy - 2 + rng.integers(0, 3)),
        }
        used = min(int(20 * busy + rng.integers(0, 5)), 128)
        recompute = int(rng.integers(0, 20)) if busy > 2 else 0
        steps.append(
            {
                "seq": seq,
                "t": WALL0 + float(t),
                "duration_seconds": duration,
                "forward_seconds": duration * 0.8,
                "policy": "continuous",
                "num_seqs": 4,
                "num_prefill_tokens": 64,
                "num_decode_tokens": 4,
                "num_kv_blocks_used": used,
                "num_kv_blocks_total": 128,
                "num_preemptions": 1 if recompute else 0,
                "num_recomputed_tokens": recompute,
                "num_waiting": waiting,
                "num_running": {"interactive": 2, "batch": 1},
            }
        )
        recomputed, prefill = recomputed + recompute, prefill + 64
        for le in BUCKETS:
            if le == "+Inf" or duration <= float(le):
                buckets[le] += 1
        total_sum, count = total_sum + duration, count + 1
        if (seq + 1) % round(SCRAPE_SECONDS / STEP_SECONDS) == 0:
            scrapes.append(
                {
                    "t": WALL0 + float(t),
                    "phase": "start" if not scrapes else "poll",
                    "ok": True,
                    "error": None,
                    "server_kind": "batchgate",
                    "metrics": {
                        "kv_usage_ratio": used / 128,
                        "kv_blocks_used": used,
                        "kv_blocks_total": 128,
                        "num_requests_waiting": waiting,
                        "num_requests_running": {"interactive": 2, "batch": 1},
                        "recomputed_tokens_total": recomputed,
                        "prefill_tokens_total": prefill,
                        "step_duration_seconds": {
                            "buckets": dict(buckets),
                            "sum": total_sum,
                            "count": count,
                        },
                    },
                    "unavailable": ["device_memory_used_bytes"],
                }
            )
            gpu.append(
                {
                    "t": WALL0 + float(t),
                    "source": "process_rss",
                    "device": None,
                    "memory_used_bytes": int(400e6 + 50e6 * busy + rng.integers(0, 5e6)),
                    "memory_total_bytes": None,
                    "utilization_ratio": None,
                    "power_watts": None,
                    "process_memory_bytes": None,
                    "note": "no NVML on this machine",
                }
            )
    scrapes[-1]["phase"] = "end"
    drain = {**scrapes[-1], "t": WALL0 + end + 0.5, "phase": "drain"}
    drain["metrics"] = {**drain["metrics"], "kv_blocks_used": 0, "kv_usage_ratio": 0.0}
    scrapes.append(drain)
    return {"steps": steps, "scrapes": scrapes, "gpu": gpu}


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
        records = _seeded_requests(
            name, stages, rng, ttft_scale=ttft_scale, error_share=error_share
        )
        rows = _seeded_observers(stages, rng, ttft_scale=ttft_scale) if observers else {}
        params = {"stages": [s.name for s in stages], "rates": [s.rate_rps for s in stages]}
        write_profile(
            root,
            name,
            records,
            **rows,
            window=(MONO0, MONO0 + stages[-1].end_seconds),
            stages=[
                {"name": s.name, "start": MONO0 + s.start_seconds, "end": MONO0 + s.end_seconds}
                for s in stages
            ],
            params=params,
            params_hash=f"hash-{name}",
            warmup_seconds=warmup_seconds,
        )
        entries[name] = {"params": params, "params_hash": f"hash-{name}"}
    write_manifest(root, entries, batching=batching)
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
