"""Server-side derivations: metrics from step records, Prometheus scrapes and sampler records.

Owns recompute ratio, prefix-cache hit ratio, preemptions (per request), KV usage and leak after
drain, queue and running peaks, step latency and server TTFT (exact from steps.jsonl, else a
histogram estimate from scrapes.jsonl, labelled so) and memory / utilization from gpu.jsonl. It
returns measurements, saying which metric the target does not expose; it does not judge.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.metrics.measurements import (
    Events,
    Histogram,
    Measurement,
    NoData,
    Samples,
    Scalar,
    Series,
)
from gate.metrics.window import Window, in_intervals, request_mask, scope_seconds, stage_intervals

if TYPE_CHECKING:
    from gate.gates.spec import Scope
    from gate.rundir.run import ProfileData

__all__ = ["server"]


def _scrapes_in(
    profile: ProfileData, intervals: list[tuple[float, float]] | None
) -> list[dict[str, Any]]:
    scrapes = [
        s for s in profile.scrapes or [] if s.get("ok") and isinstance(s.get("metrics"), dict)
    ]
    if intervals is None:
        return scrapes
    lo = min((s for s, _ in intervals), default=math.inf)
    hi = max((e for _, e in intervals), default=-math.inf)
    # The observers scrape once at the start and end of each window: allow them a second's slack.
    return [s for s in scrapes if lo - 1.0 <= float(s.get("t", math.nan)) <= hi + 1.0]


class _CounterReset(Exception):
    """A counter went down between two scrapes: the target restarted (or reset it), and what
    it counted before the reset is lost, so no change over the window can be trusted."""


def _counter_delta(scrapes: list[dict[str, Any]], name: str) -> float | None:
    values = [
        s["metrics"][name] for s in scrapes if isinstance(s["metrics"].get(name), (int, float))
    ]
    if any(later < earlier for earlier, later in itertools.pairwise(values)):
        raise _CounterReset(f"{name} went down between scrapes (did the target restart?)")
    return float(values[-1] - values[0]) if len(values) >= 2 else None


def _histogram(scrapes: list[dict[str, Any]], name: str) -> Histogram | None:
    hists = [s["metrics"][name] for s in scrapes if isinstance(s["metrics"].get(name), dict)]
    if len(hists) < 2:
        return None
    first, last = hists[0].get("buckets") or {}, hists[-1].get("buckets") or {}
    keys = sorted(last, key=lambda le: float(le))
    bounds = np.array([float(k) for k in keys])
    cumulative = np.array([float(last[k]) - float(first.get(k, 0.0)) for k in keys])
    if (cumulative < 0).any():
        raise _CounterReset(f"{name} buckets went down between scrapes (did the target restart?)")
    total_sum = float(hists[-1].get("sum", 0.0)) - float(hists[0].get("sum", 0.0))
    return Histogram(bounds=bounds, cumulative=cumulative, total_sum=total_sum)


def _unavailable(profile: ProfileData, name: str) -> str:
    listed = any(name in (s.get("unavailable") or []) for s in profile.scrapes or [])
    return f"the target does not expose {name}" if listed else f"no {name} in scrapes.jsonl"


def server(
    profile: ProfileData, metric: str, statistic: str, scope: Scope, window: Window
) -> Measurement:
    intervals = stage_intervals(profile, scope, window)
    steps = profile.steps
    step_mask = (
        in_intervals(steps.t, intervals) if steps is not None and intervals is not None else None
    )
    has_steps = steps is not None and step_mask is not None and bool(step_mask.any())
    scrapes = _scrapes_in(profile, intervals)
    if metric == "kv_leak_after_drain":
        drains = [s for s in profile.scrapes or [] if s.get("phase") == "drain" and s.get("ok")]
        if not drains:
            return NoData(reason="no drain scrape: the KV leak was not checked after the load")
        used = drains[-1].get("metrics", {}).get("kv_blocks_used")
        if not isinstance(used, (int, float)):
            return NoData(reason=_unavailable(profile, "kv_blocks_used"))
        return Scalar(value=float(used))
    if metric in ("step_latency", "server_ttft"):
        if metric == "step_latency" and has_steps:
            return Samples(values=steps.duration_seconds[step_mask])
        name = "step_duration_seconds" if metric == "step_latency" else "ttft_seconds"
        try:
            hist = _histogram(scrapes, name)
        except _CounterReset as exc:
            return NoData(reason=str(exc))
        return (
            hist
            if hist is not None
            else NoData(reason=f"no step records and {_unavailable(profile, name)}")
        )
    if metric in ("recompute_ratio", "preemptions", "preemptions_per_request"):
        if has_steps:
            recomputed = float(steps.num_recomputed_tokens[step_mask].sum())
            prefill = float(steps.num_prefill_tokens[step_mask].sum())
            preemptions: float | None = float(steps.num_preemptions[step_mask].sum())
        else:
            # Only the counters this metric reads: a reset of another says nothing about it.
            names = (
                ("recomputed_tokens_total", "prefill_tokens_total")
                if metric == "recompute_ratio"
                else ("preemptions_total",)
            )
            try:
                deltas = {name: _counter_delta(scrapes, name) for name in names}
            except _CounterReset as exc:
                return NoData(reason=str(exc))
            recomputed = deltas.get("recomputed_tokens_total")
            prefill = deltas.get("prefill_tokens_total")
            preemptions = deltas.get("preemptions_total")
        if metric == "recompute_ratio":
            if recomputed is None or prefill is None:
                return NoData(reason=_unavailable(profile, "recomputed_tokens_total"))
            if prefill <= 0:
                # Recomputation is prefill work: with none in the window the share is undefined
                # (0/0), and recomputed tokens without prefill are not a measurement.
                return NoData(reason=f"no prefill tokens in the window ({recomputed:g} recomputed)")
            return Scalar(value=recomputed / prefill)
        if preemptions is None:
            return NoData(reason=_unavailable(profile, "preemptions_total"))
        if metric == "preemptions":
            return Events(
                hits=int(preemptions),
                total=0,
                window_seconds=scope_seconds(profile, scope, window),
            )
        sent = (
            0
            if profile.requests is None
            else int(request_mask(profile, scope, window, probes=True).sum())
        )
        if not sent:
            return NoData(reason="empty scope: no requests to share the preemptions among")
        return Scalar(value=preemptions / sent, n=sent)
    if metric == "prefix_cache_hit_ratio":
        names = ("prefix_cache_hits_total", "prefix_cache_queries_total")
        try:
            hits, queries = (_counter_delta(scrapes, name) for name in names)
        except _CounterReset as exc:
            return NoData(reason=str(exc))
        if hits is None or queries is None:
            missing = names[0] if hits is None else names[1]
            rates = [
                float(s["metrics"]["prefix_cache_hit_rate"])
                for s in scrapes
                if isinstance(s["metrics"].get("prefix_cache_hit_rate"), (int, float))
            ]
            if rates:  # SGLang: its own recent hit rate, sampled at each scrape
                return Scalar(
                    value=float(np.mean(rates)),
                    n=len(rates),
                    note="estimate: the mean of the server's hit-rate gauge over the scrapes",
                )
            return NoData(reason=_unavailable(profile, missing))
        if queries <= 0:
            # vLLM (and the bundled server) count no lookups while prefix caching is off: with
            # prompts served in the window, that is a hit ratio of 0, not an absence of data.
            # Without a prompt served, 0/0 says nothing about the cache.
            served = _prompt_tokens_served(profile, scope, window)
            if hits == 0 and served > 0:
                return Scalar(value=0.0, n=int(served))
            return NoData(reason="no prefix-cache lookups in the window")
        return Scalar(value=hits / queries, n=int(queries))
    if metric == "kv_usage":
        if has_steps:
            total = steps.num_kv_blocks_total[step_mask]
            return Series(
                values=steps.num_kv_blocks_used[step_mask] / np.where(total > 0, total, np.nan)
            )
        return _gauge(scrapes, "kv_usage_ratio", None, profile)
    if metric in ("queue_length", "running_requests"):
        step_key, scrape_key = {
            "queue_length": ("num_waiting", "num_requests_waiting"),
            "running_requests": ("num_running", "num_requests_running"),
        }[metric]
        if has_steps and getattr(steps, step_key):
            per_class = getattr(steps, step_key)
            chosen = [c for c in per_class if scope.priority is None or c in scope.priority]
            if not chosen:
                return NoData(reason=_no_class(step_key, scope.priority, per_class))
            values = sum((per_class[c][step_mask] for c in chosen), np.zeros(int(step_mask.sum())))
            return Series(values=values)
        return _gauge(scrapes, scrape_key, scope.priority, profile)
    raise ValueError(f"not a server metric: {metric}")  # pragma: no cover - glossary is closed


def _prompt_tokens_served(profile: ProfileData, scope: Scope, window: Window) -> float:
    """Prompt tokens of the scope's requests that were answered (what the server looked at)."""
    req = profile.requests
    if req is None or req.n == 0:
        return 0.0
    mask = request_mask(profile, scope, window) & req.status.equals("ok")
    tokens = req.prompt_tokens[mask]
    return float(np.nansum(tokens))


def _no_class(name: str, classes: tuple[str, ...] | None, reported: Any) -> str:
    listed = ", ".join(sorted(map(str, reported))) or "none"
    return f"the target reports {name} for no class in {', '.join(classes or ())} (only: {listed})"


def _gauge(
    scrapes: list[dict[str, Any]], name: str, classes: tuple[str, ...] | None, profile: ProfileData
) -> Measurement:
    values = []
    for scrape in scrapes:
        value = scrape["metrics"].get(name)
        if isinstance(value, dict):
            chosen = [float(v) for c, v in value.items() if classes is None or c in classes]
            if not chosen:
                # A class the target does not report is not an empty queue: 0 would pass.
                return NoData(reason=_no_class(name, classes, value))
            values.append(sum(chosen))
        elif isinstance(value, (int, float)):
            if classes is not None:
                return NoData(reason=f"the target reports {name} without priority classes")
            values.append(float(value))
    if not values:
        return NoData(reason=_unavailable(profile, name))
    return Series(values=np.array(values))
