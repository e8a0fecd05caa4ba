"""The data behind every figure of the HTML report, measured through `gate.metrics.derive` only.

Owns what each figure shows and where its numbers come from: the latency CDFs
(`gate.outputs.html.cdf`) first, then time series in bins over the profile (offered / achieved /
completed rate, rolling p99 TTFT per class, the prefix-cache hit ratio of a replayed trace,
queue length per class, the offline job's timeline beside the chat latency, KV usage, memory,
step latency), each bin's value being `gate.metrics.derive.measure` on the profile clipped to
that bin (`gate.outputs.html.slices`). Stages (burst baseline / spike / recovery) and the
warm-up become shaded bands. A figure without data carries the reason instead. It does not draw
(`gate.outputs.html.svg`) or lay out the page (`gate.outputs.html.report`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gate.gates.spec import Scope
from gate.metrics import measurements
from gate.metrics.window import window_of
from gate.outputs.html.cdf import CDF_METRICS, cdf_figure
from gate.outputs.html.figure import Figure, classes_of, measure_in
from gate.outputs.html.slices import clip_profile
from gate.outputs.html.svg import Band, Line
from gate.rundir.run import ProfileData
from gate.units import UnitKind
from gate.verdicts.assess import point_value

__all__ = ["Figure", "TimeAxis", "profile_figures", "time_axis"]

_TARGET_BINS = 60
_MIN_BIN_SECONDS = 0.25
_HISTOGRAM_TRAIL_SECONDS = 3.0


@dataclass(frozen=True, kw_only=True)
class TimeAxis:
    """Bins over one profile, in request-record seconds; x is shown as seconds since `origin`."""

    origin: float
    edges: np.ndarray  # bin edges, len = bins + 1

    @property
    def bin_seconds(self) -> float:
        return float(self.edges[1] - self.edges[0])

    @property
    def centers(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2 - self.origin


def time_axis(profile: ProfileData) -> TimeAxis | None:
    """From the window start (or first planned request) to the last request's end."""
    window = window_of(profile, warmup_seconds=0.0)
    if window is None:
        return None
    start, end = window.start, max(window.end, window.activity_end)
    span = end - start
    if not math.isfinite(span) or span <= 0:
        return None
    bin_seconds = max(span / _TARGET_BINS, _MIN_BIN_SECONDS)
    count = max(math.ceil(span / bin_seconds), 1)
    return TimeAxis(origin=start, edges=start + bin_seconds * np.arange(count + 1))


def _bands(profile: ProfileData, axis: TimeAxis) -> tuple[Band, ...]:
    load = profile.load or {}
    bands = []
    warmup = float((load.get("window") or {}).get("warmup_seconds") or 0.0)
    if warmup > 0:
        bands.append(Band(start=0.0, end=warmup, label="warm-up"))
    for stage in load.get("stages") or []:
        name, start, end = stage.get("name"), stage.get("start"), stage.get("end")
        if (
            name == "main"
            or not isinstance(start, (int, float))
            or not isinstance(end, (int, float))
        ):
            continue  # a single `main` stage marks nothing
        bands.append(Band(start=start - axis.origin, end=end - axis.origin, label=str(name)))
    return tuple(bands)


class _Slices:
    """Clipped copies of one profile, made once per interval and shared by every figure."""

    def __init__(self, profile: ProfileData) -> None:
        self.profile = profile
        self._cache: dict[tuple[float, float], ProfileData] = {}

    def get(self, start: float, end: float) -> ProfileData:
        key = (start, end)
        if key not in self._cache:
            self._cache[key] = clip_profile(self.profile, start=start, end=end)
        return self._cache[key]


def _binned(
    slices: _Slices, axis: TimeAxis, metric: str, statistic: str, scope: Scope, *, trail: float
) -> tuple[np.ndarray, str | None]:
    """One value per bin (NaN where the bin has none) and the first no-data reason seen."""
    values = np.full(len(axis.edges) - 1, np.nan)
    reason = None
    for i, end in enumerate(axis.edges[1:]):
        piece = slices.get(float(end) - trail, float(end))
        measurement = measure_in(piece, metric, statistic, scope, warmup=0.0)
        if isinstance(measurement, measurements.NoData):
            reason = reason or measurement.reason
            continue
        value = point_value(measurement, statistic)
        if value is not None:
            values[i] = value
    return values, reason


def _rate_figure(profile: ProfileData, axis: TimeAxis, bands: tuple[Band, ...]) -> Figure:
    common = {
        "key": "rate",
        "title": "Offered vs achieved request rate",
        "x_label": "seconds since the window start",
        "y_label": "requests / s",
        "x_unit": UnitKind.DURATION,
        "y_unit": UnitKind.RATE,
        "bands": bands,
    }
    req = profile.requests
    if req is None or req.n == 0:
        return Figure(**common, no_data="no request records (requests.jsonl missing or empty)")
    ok = req.status.equals("ok")
    # Rates here are counts of record timestamps per bin, not a glossary metric.
    counts = {
        "offered (planned)": req.planned_at,
        "achieved (sent)": req.sent_at,
        "completed ok": np.where(ok, req.done_at, np.nan),
    }
    lines = []
    for label, times in counts.items():
        histogram, _ = np.histogram(times[np.isfinite(times)], bins=axis.edges)
        # Dashed: a client that keeps its schedule draws "sent" right on top of "planned".
        dashed = label.startswith("achieved")
        lines.append(
            Line(label=label, x=axis.centers, y=histogram / axis.bin_seconds, dashed=dashed)
        )
    note = f"{axis.bin_seconds:.3g} s bins"
    target = (profile.load or {}).get("target_rate_rps")
    if isinstance(target, (int, float)):
        note += f"; schedule mean {target:.4g}/s"
    return Figure(**common, lines=tuple(lines), y_min=0.0, note=note)


def _series_figure(
    slices: _Slices,
    axis: TimeAxis,
    bands: tuple[Band, ...],
    *,
    key: str,
    title: str,
    y_label: str,
    y_unit: UnitKind,
    metric: str,
    curves: list[tuple[str, str, Scope]],
    trail: float | None = None,
    note: str = "",
) -> Figure:
    lines, reasons = [], []
    for label, statistic, scope in curves:
        values, reason = _binned(
            slices, axis, metric, statistic, scope, trail=trail or axis.bin_seconds
        )
        if reason:
            reasons.append(reason)
        finite = np.isfinite(values)
        if finite.any():
            # Observers sample on their own period (often slower than a bin): join the samples
            # across empty bins rather than leave dots, and show the dots when they are sparse.
            sparse = int(finite.sum()) < len(values) // 2
            lines.append(
                Line(label=label, x=axis.centers[finite], y=values[finite], markers=sparse)
            )
    common = {
        "key": key,
        "title": title,
        "x_label": "seconds since the window start",
        "y_label": y_label,
        "x_unit": UnitKind.DURATION,
        "y_unit": y_unit,
        "bands": bands,
    }
    if not lines:
        return Figure(**common, no_data=reasons[0] if reasons else f"no {metric} in any bin")
    return Figure(**common, lines=tuple(lines), y_min=0.0, note=note or None)


def _job_figure(profile: ProfileData, axis: TimeAxis, bands: tuple[Band, ...]) -> Figure | None:
    """The Batch API job's timeline (offline_job): lines done as the job driver saw them, on
    the same axis as the chat latency above it; None for a profile without a job."""
    events = profile.job_events
    if events is None:
        return None
    common = {
        "key": "job",
        "title": "Batch API job timeline",
        "x_label": "seconds since the window start",
        "y_label": "job lines",
        "x_unit": UnitKind.DURATION,
        "y_unit": UnitKind.COUNT,
    }
    summary = next((e for e in events if e.get("event") == "summary"), {})
    counted = [
        (float(e["monotonic"]) - axis.origin, e["request_counts"])
        for e in events
        if isinstance(e.get("monotonic"), (int, float))
        and isinstance(e.get("request_counts"), dict)
    ]
    if not counted:
        why = summary.get("error") or summary.get("status") or "no poll with request counts"
        return Figure(**common, bands=bands, no_data=f"the job has no timeline ({why})")
    x = np.array([t for t, _ in counted])
    lines = [
        Line(label=f"lines {key}", x=x, y=np.array([float(c.get(key) or 0) for _, c in counted]),
             step=True, markers=len(counted) < 20)
        for key in ("completed", "failed")
    ]  # fmt: skip
    job_bands = list(bands)
    start, end = summary.get("submitted_at"), summary.get("completed_at")
    if isinstance(start, (int, float)):
        stop = end if isinstance(end, (int, float)) else summary.get("ended_at")
        if isinstance(stop, (int, float)):
            job_bands.append(
                Band(start=start - axis.origin, end=stop - axis.origin, label="job running")
            )
    total = summary.get("lines_total")
    note = f"job {summary.get('status', 'unfinished')}"
    if isinstance(total, int):
        note += f", {total} lines sent"
    return Figure(**common, bands=tuple(job_bands), lines=tuple(lines), y_min=0.0, note=note)


def _serverclasses_of(profile: ProfileData) -> list[str]:
    classes: set[str] = set()
    if profile.steps is not None:
        classes |= set(profile.steps.num_waiting)
    for scrape in profile.scrapes or []:
        waiting = (scrape.get("metrics") or {}).get("num_requests_waiting")
        if isinstance(waiting, dict):
            classes |= set(waiting)
    return sorted(classes)


def _time_figures(profile: ProfileData, axis: TimeAxis) -> list[Figure]:
    bands = _bands(profile, axis)
    rolling = max(3 * axis.bin_seconds, 2.0)
    priorities = classes_of(profile, "priority")
    ttft_curves = [("all", "p99", Scope())]
    if len(priorities) > 1:
        ttft_curves += [(c, "p99", Scope(priority=(c,))) for c in priorities]
    queue_classes = _serverclasses_of(profile)
    queue_curves = [(c, "peak", Scope(priority=(c,))) for c in queue_classes] or [
        ("all", "peak", Scope())
    ]
    memory_note = ""
    if any(r.get("source") == "process_rss" for r in profile.gpu or []):
        memory_note = "server process resident memory (no GPU / NVML)"
    bin_note = f"peak per {axis.bin_seconds:.3g} s bin"
    step_trail, step_note = axis.bin_seconds, f"per {axis.bin_seconds:.3g} s bin"
    if profile.steps is None or len(profile.steps.t) == 0:
        # A histogram estimate is the difference of two scrapes: a bin needs room for both.
        step_trail = max(axis.bin_seconds, _HISTOGRAM_TRAIL_SECONDS)
        step_note = f"estimate from the step histogram over the trailing {step_trail:.3g} s"
    slices = _Slices(profile)
    job = _job_figure(profile, axis, bands)
    hits = _hit_ratio_figure(slices, profile, axis, bands)
    return [
        _rate_figure(profile, axis, bands),
        _series_figure(
            slices, axis, bands, key="rolling-ttft", title="Rolling p99 TTFT",
            y_label="TTFT p99", y_unit=UnitKind.DURATION, metric="ttft", curves=ttft_curves,
            trail=rolling, note=f"p99 of requests sent in the trailing {rolling:.3g} s",
        ),
        *([job] if job is not None else []),
        *([hits] if hits is not None else []),
        _series_figure(
            slices, axis, bands, key="queue", title="Queue length per priority class",
            y_label="waiting requests", y_unit=UnitKind.COUNT, metric="queue_length",
            curves=queue_curves, note=bin_note,
        ),
        _series_figure(
            slices, axis, bands, key="kv", title="KV cache usage", y_label="used / total blocks",
            y_unit=UnitKind.RATIO, metric="kv_usage", curves=[("KV usage", "peak", Scope())],
            note=bin_note,
        ),
        _series_figure(
            slices, axis, bands, key="memory", title="Memory used", y_label="memory",
            y_unit=UnitKind.BYTES, metric="memory_used", curves=[("memory", "peak", Scope())],
            note="; ".join(n for n in (bin_note, memory_note) if n),
        ),
        _series_figure(
            slices, axis, bands, key="step", title="Engine step latency", y_label="step time",
            y_unit=UnitKind.DURATION, metric="step_latency",
            curves=[("p50", "p50", Scope()), ("p99", "p99", Scope())], trail=step_trail,
            note=step_note,
        ),
    ]  # fmt: skip


def _hit_ratio_figure(
    slices: _Slices, profile: ProfileData, axis: TimeAxis, bands: tuple[Band, ...]
) -> Figure | None:
    """The prefix-cache hit ratio over time (the server's counters between scrapes), for a
    replayed trace or a target that counts prefix-cache lookups; None otherwise."""
    counted = any(
        "prefix_cache_queries_total" in (s.get("metrics") or {}) for s in profile.scrapes or []
    )
    if profile.trace_window is None and not counted:
        return None
    # A counter's change needs two scrapes in the bin: trail over a few of them.
    trail = max(3 * axis.bin_seconds, _HISTOGRAM_TRAIL_SECONDS)
    return _series_figure(
        slices, axis, bands, key="prefix-hits", title="Prefix-cache hit ratio",
        y_label="hit tokens / prompt tokens", y_unit=UnitKind.RATIO,
        metric="prefix_cache_hit_ratio", curves=[("hit ratio", "final", Scope())], trail=trail,
        note=f"the server's hits / queries over the trailing {trail:.3g} s",
    )  # fmt: skip


_TIME_FIGURES = (
    ("rate", "Offered vs achieved request rate"),
    ("rolling-ttft", "Rolling p99 TTFT"),
    ("queue", "Queue length per priority class"),
    ("kv", "KV cache usage"),
    ("memory", "Memory used"),
    ("step", "Engine step latency"),
)


def profile_figures(profile: ProfileData) -> list[Figure]:
    """Every figure of one profile, in page order; each has lines or a no-data reason."""
    figures = [cdf_figure(profile, *spec) for spec in CDF_METRICS]
    axis = time_axis(profile)
    if axis is None:
        reason = "the profile has no measured window (no load.json window and no requests)"
        figures += [
            Figure(
                key=key, title=title, x_label="", y_label="", x_unit=UnitKind.DURATION,
                y_unit=UnitKind.COUNT, no_data=reason,
            )
            for key, title in _TIME_FIGURES
        ]  # fmt: skip
        return figures
    return figures + _time_figures(profile, axis)
