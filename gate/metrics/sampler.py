"""Sampler derivations: device memory and utilization from gpu.jsonl (NVML, or the server
process's resident memory on a machine without a GPU).

Owns turning sampler records in a window into a Series (values plus the device total, so a
ratio of total can be judged). It does not sample (`gate.observers.nvml_sampler`) or judge.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gate.metrics.measurements import Measurement, NoData, Series
from gate.metrics.window import Window, in_intervals, stage_intervals

if TYPE_CHECKING:
    from gate.gates.model import Scope
    from gate.rundir.run import ProfileData

__all__ = ["gpu"]


def gpu(profile: ProfileData, metric: str, scope: Scope, window: Window) -> Measurement:
    records = profile.gpu or []
    if not records:
        return NoData(reason="no gpu.jsonl sampler records")
    usable = [r for r in records if r.get("source") in ("nvml", "process_rss")]
    if not usable:
        return NoData(
            reason=f"the sampler could not sample: {records[0].get('note') or 'no reason given'}"
        )
    intervals = stage_intervals(profile, scope, window)
    times = np.array([float(r.get("t", math.nan)) for r in usable])
    mask = (
        in_intervals(times, intervals)
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
