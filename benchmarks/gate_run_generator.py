"""The synthetic run `bench_gate.py` measures: one `steady` profile of N request records with
~32 chunk times each (realistic latencies, 0.2 % failures, two priority classes and two length
classes), its load.json (counting the records by status, as the load generator does, which the
gate checks), steps.jsonl and gpu.jsonl over the same span. Deterministic for a seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson

__all__ = ["MONO0", "WALL0", "generate"]

WALL0, MONO0 = 1_764_400_000.0, 1000.0


def generate(run_dir: Path, n: int, *, seed: int = 0, block: int = 50_000) -> None:
    rng = np.random.default_rng(seed)
    profile_dir = run_dir / "steady"
    profile_dir.mkdir(parents=True, exist_ok=True)
    rate = 200.0
    failures = 0
    with (profile_dir / "requests.jsonl").open("wb") as out:
        for start in range(0, n, block):
            m = min(block, n - start)
            planned = MONO0 + (start + np.arange(m)) / rate
            sent = planned + rng.exponential(0.0003, m)
            first = sent + rng.lognormal(np.log(0.12), 0.4, m)
            chunks = rng.integers(24, 41, m)
            gaps = rng.gamma(4.0, 0.005, (m, 40))
            times = np.round(first[:, None] + np.cumsum(gaps, axis=1) - gaps[:, :1], 6)
            priority = np.where(rng.random(m) < 0.7, "interactive", "batch")
            length = np.where(rng.random(m) < 0.8, "short", "long")
            failed = rng.random(m) < 0.002
            failures += int(failed.sum())
            for i in range(m):
                k = int(chunks[i])
                ok = not failed[i]
                row = times[i, :k].tolist() if ok else []
                record = {
                    "id": f"0-{start + i}",
                    "profile": "steady",
                    "stage": "main",
                    "priority": str(priority[i]),
                    "length_class": str(length[i]),
                    "endpoint": "chat",
                    "stream": True,
                    "max_tokens": k,
                    "planned_at": round(float(planned[i]), 6),
                    "sent_at": round(float(sent[i]), 6),
                    "first_token_at": round(float(first[i]), 6) if ok else None,
                    "done_at": round(float(times[i, k - 1]) + 0.0005, 6),
                    "chunk_times": row,
                    "chunk_tokens": [1] * len(row),
                    "chunk_tokens_source": "usage",
                    "prompt_tokens": 180,
                    "output_tokens": k if ok else None,
                    "tokens_source": "usage",
                    "status": "ok" if ok else "http_error",
                    "http_status": 200 if ok else 503,
                    "finish_reason": "length" if ok else None,
                    "error": None if ok else "503",
                    "worker": 0,
                }
                out.write(orjson.dumps(record) + b"\n")
    end = MONO0 + n / rate
    load = {
        "schema_version": 1,
        "profile": "steady",
        "params": {"rate": rate},
        "params_hash": "x",
        "mode": "open",
        "workers": 1,
        "clock": {"monotonic_at_start": MONO0, "wall_at_start": WALL0},
        "window": {"start": MONO0, "end": end, "warmup_seconds": 5.0},
        "stages": [{"name": "main", "start": MONO0, "end": end}],
        "target_rate_rps": rate,
        "achieved_rate_rps": rate,
        "planned_requests": n,
        "sent_requests": n,
        # As the load generator counts them: the gate checks the records against these.
        "counts_by_status": {"ok": n - failures, "http_error": failures},
        "schedule_lag_seconds": {},
        "client_cpu_ratio": {"mean": 0.3, "max": 0.5},
        "concurrency_cap": 1024,
        "cap_reached_count": 0,
        "limits": {},
        "measurement_valid": True,
        "invalid_reasons": [],
        "ended": "completed",
    }
    (profile_dir / "load.json").write_text(json.dumps(load))
    seconds = int(n / rate)
    with (profile_dir / "steps.jsonl").open("wb") as out:
        for s in range(seconds * 50):  # 50 steps/s
            out.write(
                orjson.dumps(
                    {
                        "seq": s,
                        "t": WALL0 + s * 0.02,
                        "duration_seconds": float(rng.gamma(4.0, 0.004)),
                        "forward_seconds": 0.01,
                        "policy": "continuous",
                        "num_seqs": 32,
                        "num_prefill_tokens": 400,
                        "num_decode_tokens": 32,
                        "num_kv_blocks_used": 600,
                        "num_kv_blocks_total": 1000,
                        "num_preemptions": 0,
                        "num_recomputed_tokens": 0,
                        "num_waiting": {"interactive": 2, "batch": 8},
                        "num_running": {"interactive": 20, "batch": 12},
                    }
                )
                + b"\n"
            )
    with (profile_dir / "gpu.jsonl").open("wb") as out:
        for s in range(seconds * 20):
            out.write(
                orjson.dumps(
                    {
                        "t": WALL0 + s * 0.05,
                        "source": "nvml",
                        "device": 0,
                        "memory_used_bytes": 60e9,
                        "memory_total_bytes": 80e9,
                        "utilization_ratio": 0.9,
                        "power_watts": 500.0,
                        "process_memory_bytes": 59e9,
                        "note": None,
                    }
                )
                + b"\n"
            )
    (profile_dir / "scrapes.jsonl").write_text("")
