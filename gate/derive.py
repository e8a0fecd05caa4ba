"""THE derivation of every glossary metric (DESIGN.md §5) from run records; one formula each.

Owns the formulas: TTFT, TTFT from planned, E2E, E2E from planned, per-token ITL, TPOT,
schedule lag, goodput, throughput, error and 5xx shares, recovery time, recompute ratio,
preemptions (per request), KV usage / leak after drain, queue and running peaks, step latency
(exact from steps.jsonl, else a histogram estimate from scrapes.jsonl, labelled so) and memory
from gpu.jsonl. It returns measurements (samples, events, series, scalars, histograms, or
NoData with the reason); it does not know thresholds, confidence or verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gate.gates_file import Scope, Slos
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
    "itl_gaps",
    "measure",
    "window_of",
]


@dataclass(frozen=True, kw_only=True)
class Samples:
    values: np.ndarray
    estimate: bool = False


@dataclass(frozen=True, kw_only=True)
class Histogram:
    """Cumulative bucket counts over the window; always an estimate of the distribution."""

    bounds: np.ndarray  # ascending `le` values, last one +inf
    cumulative: np.ndarray
    total_sum: float

    @property
    def count(self) -> int:
        return int(self.cumulative[-1]) if len(self.cumulative) else 0


@dataclass(frozen=True, kw_only=True)
class Events:
    hits: int
    total: int
    window_seconds: float


@dataclass(frozen=True, kw_only=True)
class Series:
    values: np.ndarray
    totals: np.ndarray | None = None  # for "% of device total"
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class Scalar:
    value: float
    n: int = 1
    note: str | None = None
    lower_bound: bool = False  # the true value is at least this (e.g. not recovered yet)


@dataclass(frozen=True, kw_only=True)
class NoData:
    reason: str


Measurement = Samples | Histogram | Events | Series | Scalar | NoData


@dataclass(frozen=True, kw_only=True)
class Window:
    """Measured window in request-record (monotonic) seconds, warm-up already cut off."""

    start: float
    end: float
    activity_end: float  # last request finished (server metrics look until here)

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


def itl_gaps(
    times: np.ndarray, tokens: np.ndarray | None, num_chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ITL: a chunk carrying k tokens after a gap Δt contributes k gaps of Δt/k.

    `times` / `tokens` are the chunks of all requests back to back (`tokens` None: one token
    each), `num_chunks` the chunks per request. Returns the gaps and how many belong to each.
    """
    n = len(num_chunks)
    if len(times) < 2:
        return np.zeros(0, dtype=np.float32), np.zeros(n, dtype=np.int64)
    owner = np.repeat(np.arange(n), num_chunks)
    same = owner[1:] == owner[:-1]  # gap between two chunks of the same request
    # float32 halves the largest array of a run (32M gaps for 1M requests); its 24-bit mantissa
    # still resolves a 20 ms gap to about a nanosecond.
    delta = np.diff(times)[same].astype(np.float32)
    if tokens is None:
        return delta, np.maximum(num_chunks - 1, 0).astype(np.int64)
    k = tokens[1:][same]
    gaps = np.repeat(delta / np.maximum(k, 1).astype(np.float32), np.maximum(k, 0))
    counts = np.bincount(owner[1:][same], weights=k, minlength=n).astype(np.int64)
    return gaps, counts


def window_of(profile: ProfileData, *, warmup_seconds: float | None) -> Window | None:
    """The measured window from load.json (or, while a load still runs, from the records)."""
    load = profile.load or {}
    req = profile.requests
    window = load.get("window") or {}
    start, end = window.get("start"), window.get("end")
    if start is None or end is None:
        if req is None or req.n == 0:
            return None
        start, end = float(np.nanmin(req.planned_at)), float(np.nanmax(req.planned_at))
    warmup = (
        warmup_seconds if warmup_seconds is not None else float(window.get("warmup_seconds") or 0.0)
    )
    activity_end = float(end)
    if req is not None and req.n and not np.all(np.isnan(req.done_at)):
        activity_end = max(activity_end, float(np.nanmax(req.done_at)))
    return Window(start=float(start) + warmup, end=float(end), activity_end=activity_end)


def _request_mask(profile: ProfileData, scope: Scope, window: Window) -> np.ndarray:
    req = profile.requests
    assert req is not None  # callers check
    mask = req.planned_at >= window.start
    for key in ("stage", "priority", "length_class", "endpoint"):
        part = getattr(req, key).mask(getattr(scope, key))
        if part is not None:
            mask &= part
    return mask


def _stage_intervals(
    profile: ProfileData, scope: Scope, window: Window
) -> list[tuple[float, float]] | None:
    """Wall-clock intervals the scope covers; None when times cannot be converted."""
    start, end = profile.to_wall(window.start), profile.to_wall(window.activity_end)
    if start is None or end is None:
        return None
    if scope.stage is None:
        return [(start, end)]
    intervals = []
    for stage in (profile.load or {}).get("stages") or []:
        if stage.get("name") in scope.stage:
            s, e = profile.to_wall(stage["start"]), profile.to_wall(stage["end"])
            if s is not None and e is not None:
                intervals.append((max(s, start), min(e, end)))
    return intervals


def _in_intervals(t: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    mask = np.zeros(len(t), dtype=bool)
    for s, e in intervals:
        mask |= (t >= s) & (t <= e)
    return mask


def _client(
    profile: ProfileData, metric: str, statistic: str, scope: Scope, window: Window, slos: Slos
) -> Measurement:
    req = profile.requests
    if req is None:
        return NoData(reason=f"profile {profile.name!r} has no requests.jsonl")
    mask = _request_mask(profile, scope, window)
    ok = req.status.equals("ok")
    if metric == "itl":
        return Samples(values=req.itl_seconds[np.repeat(mask, req.itl_counts)])
    if metric == "recovery_time":
        return _recovery(profile, slos)
    formulas = {
        "ttft": lambda: req.first_token_at - req.sent_at,
        "ttft_from_planned": lambda: req.first_token_at - req.planned_at,
        "e2e": lambda: np.where(ok, req.done_at - req.sent_at, np.nan),
        "e2e_from_planned": lambda: np.where(ok, req.done_at - req.planned_at, np.nan),
        "tpot": lambda: tpot(req.first_token_at, req.done_at, req.output_tokens, ok),
        "schedule_lag": lambda: req.sent_at - req.planned_at,
    }
    if metric in formulas:
        values = formulas[metric]()[mask]
        return Samples(values=values[~np.isnan(values)])
    seconds = _scope_seconds(profile, scope, window)
    if metric == "output_tokens":
        tokens = np.nan_to_num(req.output_tokens[mask & ok])
        if statistic == "mean":
            return Samples(values=tokens)
        return Events(hits=int(tokens.sum()), total=int((mask & ok).sum()), window_seconds=seconds)
    hits = {
        "errors": lambda: ~ok,
        "http_5xx": lambda: (req.http_status >= 500) & (req.http_status < 600),
        "requests": lambda: ok,
        "goodput": lambda: goodput_mask(req, ok, slos),
    }[metric]()
    return Events(hits=int((hits & mask).sum()), total=int(mask.sum()), window_seconds=seconds)


def tpot(
    first_token_at: np.ndarray, done_at: np.ndarray, output_tokens: np.ndarray, ok: np.ndarray
) -> np.ndarray:
    """(done - first token) / (output_tokens - 1) for ok requests with more than one token."""
    with np.errstate(divide="ignore", invalid="ignore"):
        values = (done_at - first_token_at) / (output_tokens - 1)
    return np.where(ok & (output_tokens > 1), values, np.nan)


def goodput_mask(req: Any, ok: np.ndarray, slos: Slos) -> np.ndarray:
    """Ok requests meeting every SLO given; a TPOT SLO ignores single-token answers."""
    good = ok.copy()
    if slos.ttft_seconds is not None:
        good &= (req.first_token_at - req.sent_at) <= slos.ttft_seconds
    if slos.e2e_seconds is not None:
        good &= (req.done_at - req.sent_at) <= slos.e2e_seconds
    if slos.tpot_seconds is not None:
        per_token = tpot(req.first_token_at, req.done_at, req.output_tokens, ok)
        good &= np.isnan(per_token) | (per_token <= slos.tpot_seconds)
    return good


def _scope_seconds(profile: ProfileData, scope: Scope, window: Window) -> float:
    if scope.stage is None:
        return window.seconds
    total = 0.0
    for stage in (profile.load or {}).get("stages") or []:
        if stage.get("name") in scope.stage:
            total += max(min(stage["end"], window.end) - max(stage["start"], window.start), 0.0)
    return total


def _recovery(profile: ProfileData, slos: Any) -> Measurement:
    factor, bin_seconds = slos.recovery_factor, slos.recovery_window_seconds
    req = profile.requests
    assert req is not None
    stages = {s.get("name"): s for s in (profile.load or {}).get("stages") or []}
    if "spike" not in stages or "baseline" not in stages:
        return NoData(reason="recovery time needs `baseline` and `spike` stages in load.json")
    ttft = req.first_token_at - req.sent_at
    before = ttft[req.stage.equals("baseline") & (req.planned_at < stages["spike"]["start"])]
    before = before[~np.isnan(before)]
    if len(before) == 0:
        return NoData(reason="no TTFT samples before the spike")
    limit = factor * float(np.quantile(before, 0.99))
    spike_end = float(stages["spike"]["end"])
    after = (req.sent_at >= spike_end) & ~np.isnan(ttft)
    times, values = req.sent_at[after], ttft[after]
    if len(times) == 0:
        return NoData(reason="no requests after the spike")
    span = float(times.max() - spike_end)
    for k in range(math.ceil(span / bin_seconds) + 1):
        lo, hi = spike_end + k * bin_seconds, spike_end + (k + 1) * bin_seconds
        in_bin = values[(times >= lo) & (times < hi)]
        if len(in_bin) and float(np.quantile(in_bin, 0.99)) <= limit:
            return Scalar(value=hi - spike_end, n=len(values))
    return Scalar(
        value=span, n=len(values), lower_bound=True, note="not recovered by the end of the run"
    )


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


def _counter_delta(scrapes: list[dict[str, Any]], name: str) -> float | None:
    values = [
        s["metrics"][name] for s in scrapes if isinstance(s["metrics"].get(name), (int, float))
    ]
    return float(values[-1] - values[0]) if len(values) >= 2 else None


def _histogram(scrapes: list[dict[str, Any]], name: str) -> Histogram | None:
    hists = [s["metrics"][name] for s in scrapes if isinstance(s["metrics"].get(name), dict)]
    if len(hists) < 2:
        return None
    first, last = hists[0].get("buckets") or {}, hists[-1].get("buckets") or {}
    keys = sorted(last, key=lambda le: float(le))
    bounds = np.array([float(k) for k in keys])
    cumulative = np.array([float(last[k]) - float(first.get(k, 0.0)) for k in keys])
    total_sum = float(hists[-1].get("sum", 0.0)) - float(hists[0].get("sum", 0.0))
    return Histogram(bounds=bounds, cumulative=cumulative, total_sum=total_sum)


def _unavailable(profile: ProfileData, name: str) -> str:
    listed = any(name in (s.get("unavailable") or []) for s in profile.scrapes or [])
    return f"the target does not expose {name}" if listed else f"no {name} in scrapes.jsonl"


def _server(
    profile: ProfileData, metric: str, statistic: str, scope: Scope, window: Window
) -> Measurement:
    intervals = _stage_intervals(profile, scope, window)
    steps = profile.steps
    step_mask = (
        _in_intervals(steps.t, intervals) if steps is not None and intervals is not None else None
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
        hist = _histogram(scrapes, name)
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
            recomputed = _counter_delta(scrapes, "recomputed_tokens_total")
            prefill = _counter_delta(scrapes, "prefill_tokens_total")
            preemptions = _counter_delta(scrapes, "preemptions_total")
        if metric == "recompute_ratio":
            if recomputed is None or prefill is None:
                return NoData(reason=_unavailable(profile, "recomputed_tokens_total"))
            return Scalar(value=recomputed / prefill if prefill > 0 else 0.0)
        if preemptions is None:
            return NoData(reason=_unavailable(profile, "preemptions_total"))
        if metric == "preemptions":
            return Events(
                hits=int(preemptions),
                total=0,
                window_seconds=_scope_seconds(profile, scope, window),
            )
        sent = 0 if profile.requests is None else int(_request_mask(profile, scope, window).sum())
        return Scalar(value=preemptions / sent if sent else 0.0, n=sent)
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
            values = sum((per_class[c][step_mask] for c in chosen), np.zeros(int(step_mask.sum())))
            return Series(values=values)
        return _gauge(scrapes, scrape_key, scope.priority, profile)
    raise ValueError(f"not a server metric: {metric}")  # pragma: no cover - glossary is closed


def _gauge(
    scrapes: list[dict[str, Any]], name: str, classes: tuple[str, ...] | None, profile: ProfileData
) -> Measurement:
    values = []
    for scrape in scrapes:
        value = scrape["metrics"].get(name)
        if isinstance(value, dict):
            values.append(
                sum(float(v) for c, v in value.items() if classes is None or c in classes)
            )
        elif isinstance(value, (int, float)):
            if classes is not None:
                return NoData(reason=f"the target reports {name} without priority classes")
            values.append(float(value))
    if not values:
        return NoData(reason=_unavailable(profile, name))
    return Series(values=np.array(values))


def _gpu(profile: ProfileData, metric: str, scope: Scope, window: Window) -> Measurement:
    records = profile.gpu or []
    if not records:
        return NoData(reason="no gpu.jsonl sampler records")
    usable = [r for r in records if r.get("source") in ("nvml", "process_rss")]
    if not usable:
        return NoData(
            reason=f"the sampler could not sample: {records[0].get('note') or 'no reason given'}"
        )
    intervals = _stage_intervals(profile, scope, window)
    times = np.array([float(r.get("t", math.nan)) for r in usable])
    mask = (
        _in_intervals(times, intervals)
        if intervals is not None
        else np.ones(len(usable), dtype=bool)
    )
    chosen = [r for r, keep in zip(usable, mask, strict=True) if keep]
    field = "memory_used_bytes" if metric == "memory_used" else "utilization_ratio"
    values = np.array([r.get(field) for r in chosen], dtype=np.float64)
    totals = np.array([r.get("memory_total_bytes") for r in chosen], dtype=np.float64)
    keep = ~np.isnan(values)
    if not keep.any():
        return NoData(reason=f"no {field} in the sampler records of this window")
    note = (
        "process resident memory (no GPU/NVML)"
        if usable[0].get("source") == "process_rss"
        else None
    )
    return Series(values=values[keep], totals=totals[keep], note=note)


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
        return _client(
            profile,
            metric,
            statistic,
            scope,
            window,
            settings if metric == "recovery_time" else slos,
        )
    if entry.source is Source.SERVER:
        return _server(profile, metric, statistic, scope, window)
    return _gpu(profile, metric, scope, window)
