"""Sampler derivations: device memory and utilization from gpu.jsonl (NVML, or the server
process's resident memory on a machine without a GPU), and — when the sampler had neither (a
remote target: no PID to read, no NVML) — the server's own `process_resident_memory_bytes` from
its scrapes.

Owns turning sampler records in a window into a Series (values plus the device total, so a
ratio of total can be judged). It does not sample (`gate.observers.nvml_sampler`) or judge.
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.metrics.measurements import Measurement, NoData, Series
from gate.metrics.window import Window, in_intervals, stage_intervals

if TYPE_CHECKING:
    from gate.gates.model import Scope
    from gate.rundir.run import ProfileData

__all__ = ["gpu"]

_SERVER_RSS = "process_resident_memory_bytes"


def gpu(profile: ProfileData, metric: str, scope: Scope, window: Window) -> Measurement:
    records = profile.gpu or []
    usable = [r for r in records if r.get("source") in ("nvml", "process_rss")]
    if not usable:
        why = (
            f"the sampler could not sample: {records[0].get('note') or 'no reason given'}"
            if records
            else "no gpu.jsonl sampler records"
        )
        if metric == "memory_used":
            return _server_rss(profile, scope, window, why)
        return NoData(reason=why)
    intervals = stage_intervals(profile, scope, window)
    field = "memory_used_bytes" if metric == "memory_used" else "utilization_ratio"
    try:
        # One pass in C over records that all have the keys (a run's 100k samples), the
        # times, values and totals as columns of one array (None reads as NaN either way).
        rows = list(map(itemgetter("t", field, "memory_total_bytes"), usable))
        table = np.array(rows, dtype=np.float64).reshape(len(rows), 3)
        times, values, totals = table[:, 0], table[:, 1], table[:, 2]
        if intervals is not None:
            inside = in_intervals(times, intervals)
            values, totals = values[inside], totals[inside]
    except (KeyError, TypeError, ValueError):  # a record without one, or not a number
        chosen = _in_window(usable, intervals)
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


def _in_window(
    records: list[dict[str, Any]], intervals: list[tuple[float, float]] | None
) -> list[dict[str, Any]]:
    if intervals is None:
        return records
    times = np.array([float(r.get("t", math.nan)) for r in records])
    return [r for r, keep in zip(records, in_intervals(times, intervals), strict=True) if keep]


def _server_rss(profile: ProfileData, scope: Scope, window: Window, why: str) -> Measurement:
    """The server's resident memory as it reports it on /metrics (prometheus_client's process
    collector: bundled server, vLLM). Coarser than the sampler — one value per scrape — so the
    note says so; it never stands in for device memory on a GPU target, where NVML is the truth
    and its absence is a reason to fail closed."""
    scrapes = [
        s
        for s in profile.scrapes or []
        if s.get("ok") and isinstance((s.get("metrics") or {}).get(_SERVER_RSS), (int, float))
    ]
    if not scrapes:
        return NoData(reason=f"{why}; and the target's scrapes have no {_SERVER_RSS}")
    chosen = _in_window(scrapes, stage_intervals(profile, scope, window))
    if not chosen:
        return NoData(reason=f"{why}; and no scrape with {_SERVER_RSS} fell in this window")
    values = np.array([float(s["metrics"][_SERVER_RSS]) for s in chosen], dtype=np.float64)
    return Series(
        values=values,
        totals=None,
        note=f"the server's own {_SERVER_RSS} from {len(values)} scrapes ({why})",
    )
