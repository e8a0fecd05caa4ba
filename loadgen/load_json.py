"""`load.json`: the per-profile summary of what the load generator offered and achieved.

Owns assembling the docs/records.md `load.json` object from the resolved profile, the worker
summaries and the record counts (by status, and by where chunk token counts came from),
including the measurement-validity verdict (schedule lag p99 and client CPU against their
limits) and the request fields left out of every body (`dropped_fields`, and whether a trace
replay's answer lengths were asked for exactly). It does not read requests.jsonl and does not
write files.
"""

from __future__ import annotations

from typing import Any

from loadgen.percentile import percentile
from loadgen.profiles import ProfileSpec, params_hash

__all__ = ["build_load_json"]


def build_load_json(
    *,
    spec: ProfileSpec,
    workers: int,
    summaries: list[dict[str, Any]],
    counts_by_status: dict[str, int],
    chunk_tokens_sources: dict[str, int] | None = None,
    t0: float,
    wall_at_t0: float,
    ended_at: float,
    ended: str,
    batch_job: dict[str, Any] | None = None,
    trace: dict[str, Any] | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """load.json's content; `failure`: why a load driver stopped early (an invalid reason)."""
    p = spec.params
    closed = spec.mode == "closed"
    duration = spec.schedule.duration_seconds
    window_end = min(t0 + duration, ended_at) if ended != "completed" else t0 + duration
    window_len = max(window_end - t0, 1e-9)
    lags = [lag for s in summaries for lag in s["lags"]]
    cpu_means = [s["cpu"]["mean"] for s in summaries]
    cpu_max = max((s["cpu"]["max"] for s in summaries), default=0.0)
    cpu_mean = sum(cpu_means) / len(cpu_means) if cpu_means else 0.0
    sent = sum(s["sent"] for s in summaries)
    lag = {
        "p50": percentile(lags, 50) or 0.0,
        "p90": percentile(lags, 90) or 0.0,
        "p99": percentile(lags, 99) or 0.0,
        "max": max(lags) if lags else 0.0,
    }
    limits = {
        "max_schedule_lag_p99_seconds": float(p["max_schedule_lag_p99_seconds"]),
        "max_client_cpu_ratio": float(p["max_client_cpu_ratio"]),
    }
    dropped = sorted(p.get("drop_fields") or [])
    reasons = []
    if lag["p99"] > limits["max_schedule_lag_p99_seconds"]:
        reasons.append(
            f"schedule lag p99 {lag['p99'] * 1000:.1f} ms exceeds the limit "
            f"{limits['max_schedule_lag_p99_seconds'] * 1000:.1f} ms (client could not keep up)"
        )
    if cpu_max > limits["max_client_cpu_ratio"]:
        reasons.append(
            f"client CPU peaked at {cpu_max:.2f} of a core, above the limit "
            f"{limits['max_client_cpu_ratio']:.2f} (load generator saturated)"
        )
    if sent == 0:
        reasons.append("no request was sent")
    if len(summaries) < workers:
        reasons.append(f"only {len(summaries)} of {workers} workers reported their summary")
    if failure is not None:
        reasons.append(failure)
    load = {
        "schema_version": 1,
        "profile": spec.name,
        "params": p,
        "params_hash": params_hash(p),
        "mode": spec.mode,
        "workers": workers,
        "clock": {"monotonic_at_start": t0, "wall_at_start": wall_at_t0},
        "window": {
            "start": t0,
            "end": window_end,
            "warmup_seconds": float(p["warmup_seconds"]),
        },
        "stages": [
            {"name": name, "start": t0 + start, "end": t0 + end}
            for name, start, end in spec.schedule.stage_bounds()
        ],
        "target_rate_rps": None if closed else spec.schedule.mean_rate_rps,
        "achieved_rate_rps": sent / window_len,
        "planned_requests": sum(s["planned"] for s in summaries),
        "sent_requests": sent,
        "counts_by_status": dict(sorted(counts_by_status.items())),
        # Records with content chunks, by `chunk_tokens_source`: how many have real per-chunk
        # token counts (`usage`) and how many a per-chunk ITL (`assumed`, `mixed`).
        "chunk_tokens_sources": dict(sorted((chunk_tokens_sources or {}).items())),
        "schedule_lag_seconds": lag,
        "client_cpu_ratio": {"mean": cpu_mean, "max": cpu_max},
        "concurrency_cap": int(p["max_concurrency"]),
        "cap_reached_count": sum(s["cap_reached"] for s in summaries),
        # `ok` streams that ended after their finish_reason (and usage) without `data: [DONE]`
        # (Hugging Face transformers serve): complete answers, counted so a reader knows.
        "streams_ended_without_done": sum(s.get("streams_without_done", 0) for s in summaries),
        # Body fields left out of every request (the target refuses them): what they asked
        # for (exact answer lengths, top_k, thinking) was not asked.
        "dropped_fields": dropped,
        "limits": limits,
        "measurement_valid": not reasons,
        "invalid_reasons": reasons,
        "ended": ended,
    }
    if trace is not None:  # the trace profile: the replayed window and how many were clamped
        load["trace"] = {**trace, "output_lengths_exact": _exact_lengths(p, dropped)}
    if batch_job is not None:
        # `window` stays the chat schedule's, which rates and latencies are measured over; the
        # job's own span (submitted_at .. ended_at) is in here, for server-side windows.
        load["batch_job"] = _batch_job_summary(batch_job)
    return load


# What asks a target for exactly max_tokens (loadgen.client, exact_output).
_EXACT_LENGTH_FIELDS = ("min_tokens", "ignore_eos")


def _exact_lengths(params: dict[str, Any], dropped: list[str]) -> bool:
    """Whether the replay asked for the trace's exact answer lengths: `exact_output` on and
    neither of its fields dropped (without them an answer may end at the model's EOS)."""
    return bool(params.get("exact_output")) and not set(dropped) & set(_EXACT_LENGTH_FIELDS)


def _batch_job_summary(job: dict[str, Any]) -> dict[str, Any]:
    """The job's summary line (docs/records.md, batch_job.jsonl) less its timeline fields."""
    out = {k: v for k, v in job.items() if k not in ("event", "wall", "monotonic")}
    start, end = job.get("submitted_at"), job.get("completed_at")
    out["duration_seconds"] = end - start if start is not None and end is not None else None
    return out
