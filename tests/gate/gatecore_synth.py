"""Synthetic run directories (docs/records.md formats) with known distributions, for gate tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

WALL0 = 1_764_400_000.0
MONO0 = 1000.0


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


def load_json(
    profile: str,
    records: list[dict[str, Any]],
    *,
    measurement_valid: bool = True,
    ended: str = "completed",
    warmup_seconds: float = 0.0,
    stages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    start = min(r["planned_at"] for r in records) if records else MONO0
    end = max(r["planned_at"] for r in records) if records else MONO0 + 1
    return {
        "schema_version": 1,
        "profile": profile,
        "params": {"rate": 100},
        "params_hash": "p" * 8,
        "mode": "open",
        "workers": 1,
        "clock": {"monotonic_at_start": MONO0, "wall_at_start": WALL0},
        "window": {"start": start, "end": end, "warmup_seconds": warmup_seconds},
        "stages": stages or [{"name": "main", "start": start, "end": end}],
        "target_rate_rps": 100.0,
        "achieved_rate_rps": 99.5,
        "planned_requests": len(records),
        "sent_requests": len(records),
        "counts_by_status": {},
        "schedule_lag_seconds": {"p99": 0.001},
        "client_cpu_ratio": {"mean": 0.1, "max": 0.2},
        "concurrency_cap": 256,
        "cap_reached_count": 0,
        "limits": {},
        "measurement_valid": measurement_valid,
        "invalid_reasons": [] if measurement_valid else ["schedule lag p99 0.2s > 0.05s"],
        "ended": ended,
    }


def write_jsonl(path: Path, records: list[dict[str, Any]], *, partial_tail: bool = False) -> None:
    with path.open("wb") as handle:
        for record in records:
            handle.write(orjson.dumps(record) + b"\n")
        if partial_tail:
            handle.write(b'{"id": "cut-off", "planned_')


def write_profile(
    run_dir: Path,
    profile: str,
    records: list[dict[str, Any]],
    *,
    steps: list[dict[str, Any]] | None = None,
    scrapes: list[dict[str, Any]] | None = None,
    gpu: list[dict[str, Any]] | None = None,
    **load_kwargs: Any,
) -> Path:
    directory = run_dir / profile
    directory.mkdir(parents=True, exist_ok=True)
    write_jsonl(directory / "requests.jsonl", records)
    (directory / "load.json").write_text(json.dumps(load_json(profile, records, **load_kwargs)))
    for name, rows in (("steps", steps), ("scrapes", scrapes), ("gpu", gpu)):
        if rows is not None:
            write_jsonl(directory / f"{name}.jsonl", rows)
    return directory


def write_manifest(
    run_dir: Path, profiles: Sequence[str], *, ended: str = "completed", model: str = "tiny"
) -> None:
    manifest = {
        "schema_version": 1,
        "tool": {"version": "0.1.0", "git_sha": "abc"},
        "target": {
            "url": "http://127.0.0.1:1",
            "server_kind": "batchgate",
            "model": model,
            "batching": {"policy": "continuous"},
            "batching_hash": "b1",
        },
        "hardware": {"cpu": "test-cpu", "cpu_count": 2, "gpu": None, "driver": None},
        "profiles": {p: {"params": {"rate": 100}, "params_hash": "p" * 8} for p in profiles},
        "gates_file": None,
        "gates_hash": None,
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:01:00Z",
        "scale": "smoke",
        "preset": None,
        "ended": ended,
        "reason": None if ended == "completed" else "target exited with code -9",
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


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


def write_gates(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
