"""THE derivation of every glossary metric (DESIGN.md §5) from run records; one formula each.

Owns the formulas: TTFT, TTFT from planned, E2E, E2E from planned, per-token ITL, TPOT,
schedule lag, goodput, throughput, error and 5xx shares, recovery time, recompute ratio,
preemptions (per request), KV usage / leak after drain, queue and running peaks, step latency
(exact from steps.jsonl, else a histogram estimate from scrapes.jsonl, labelled so) and memory
from gpu.jsonl. It returns measurements (samples, events, series, scalars, histograms, or
NoData with the reason); it does not know thresholds, confidence or verdicts. The formulas live
in `gate.derive_client` (request records) and `gate.derive_server` (steps, scrapes, sampler);
the value types in `gate.measurements`, the window in `gate.window`; this module dispatches by
the glossary's source and keeps their public names importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gate.derive_client import client, goodput_mask, itl_gaps, tpot
from gate.derive_server import gpu, server
from gate.measurements import Events, Histogram, Measurement, NoData, Samples, Scalar, Series
from gate.window import Window, window_of

if TYPE_CHECKING:
    from gate.gates_file import Scope
    from gate.rundir import ProfileData

__all__ = [
    "Events",
    "Histogram",
    "Measurement",
    "NoData",
    "Samples",
    "Scalar",
    "Series",
    "Window",
    "goodput_mask",
    "itl_gaps",
    "measure",
    "tpot",
    "window_of",
]


def _run(profile: ProfileData, metric: str, statistic: str) -> Measurement:
    load = profile.load
    if load is None:
        return NoData(reason="load.json missing")
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
) -> Measurement:
    """Derive one glossary metric for one profile and scope (warm-up excluded)."""
    from gate.glossary import Source, get_metric  # local: keeps this module's import light

    entry = get_metric(metric)
    window = window_of(profile, warmup_seconds=warmup_seconds)
    if entry.source is Source.RUN:
        return _run(profile, metric, statistic)
    if window is None:
        return NoData(reason=f"profile {profile.name!r} has no window (no load.json, no records)")
    if entry.source is Source.CLIENT:
        return client(
            profile,
            metric,
            statistic,
            scope,
            window,
            settings if metric == "recovery_time" else slos,
        )
    if entry.source is Source.SERVER:
        return server(profile, metric, statistic, scope, window)
    return gpu(profile, metric, scope, window)
