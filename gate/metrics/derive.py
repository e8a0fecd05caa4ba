"""THE derivation of every glossary metric (docs/gates.md) from run records; one formula each.

Owns the formulas: TTFT, TTFT from planned, E2E, E2E from planned, per-token ITL, TPOT,
schedule lag, goodput, throughput, error and 5xx shares, recovery time, recompute ratio,
preemptions (per request), KV usage / leak after drain, queue and running peaks, step latency
(exact from steps.jsonl, else a histogram estimate from scrapes.jsonl, labelled so), memory
from gpu.jsonl and the offline job's outcome. It returns measurements (samples, events, series,
scalars, histograms, or NoData with the reason); it does not know thresholds, confidence or
verdicts. The formulas live in `gate.metrics.client` (request records), `gate.metrics.server_side`
(steps, scrapes), `gate.metrics.sampler` (gpu.jsonl) and `gate.metrics.batch_job` (load.json's
`batch_job`), `gate.metrics.consistency` (probe answers); the value types in
`gate.metrics.measurements`, the window in `gate.metrics.window`. This module dispatches by the
glossary's source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gate.glossary import Source, get_metric
from gate.metrics.batch_job import BATCH_JOB_METRICS, batch_job
from gate.metrics.client import client
from gate.metrics.consistency import CONSISTENCY_METRICS, consistency
from gate.metrics.measurements import Measurement, NoData, Scalar
from gate.metrics.sampler import gpu
from gate.metrics.server_side import server
from gate.metrics.window import window_of

if TYPE_CHECKING:
    from gate.gates.spec import Scope
    from gate.rundir.run import ProfileData

__all__ = ["measure"]


def _run(profile: ProfileData, metric: str, statistic: str) -> Measurement:
    load = profile.load
    if load is None:
        return NoData(reason="load.json missing")
    if metric in BATCH_JOB_METRICS:
        return batch_job(load, metric)
    if metric == "measurement_valid":
        valid = bool(load.get("measurement_valid")) and load.get("ended") == "completed"
        return Scalar(value=1.0 if valid else 0.0)
    if metric == "client_cpu":
        value = (load.get("client_cpu_ratio") or {}).get(statistic)
        return (
            Scalar(value=float(value))
            if isinstance(value, (int, float))
            else NoData(reason="no client_cpu_ratio in load.json")
        )
    value = load.get("achieved_rate_rps")
    return (
        Scalar(value=float(value))
        if isinstance(value, (int, float))
        else NoData(reason="no achieved_rate_rps in load.json")
    )


def measure(
    profile: ProfileData,
    metric: str,
    statistic: str,
    scope: Scope,
    *,
    slos: Any,
    settings: Any,
    warmup_seconds: float | None,
    memo: dict[Any, Any] | None = None,
) -> Measurement:
    """Derive one glossary metric for one profile and scope (warm-up excluded). `memo`: a dict
    one evaluation keeps, for what its gates on one profile share (`gate.metrics.client`)."""
    entry = get_metric(metric)
    if memo is None:
        window = window_of(profile, warmup_seconds=warmup_seconds)
    else:
        key = (profile.name, "window", warmup_seconds)
        if key not in memo:
            memo[key] = window_of(profile, warmup_seconds=warmup_seconds)
        window = memo[key]
    if entry.source is Source.RUN:
        return _run(profile, metric, statistic)
    if window is None:
        return NoData(reason=f"profile {profile.name!r} has no window (no load.json, no records)")
    if metric in CONSISTENCY_METRICS:
        return consistency(profile, metric, scope)
    if entry.source is Source.CLIENT:
        return client(
            profile,
            metric,
            statistic,
            scope,
            window,
            settings if metric == "recovery_time" else slos,
            memo=memo,
        )
    if entry.source is Source.SERVER:
        return server(profile, metric, statistic, scope, window)
    return gpu(profile, metric, scope, window)
