"""Sampler derivations: device memory and utilization from gpu.jsonl (NVML, or the server
process's resident memory on a machine without a GPU), and — when the sampler had neither (a
remote target: no PID to read, no NVML) — the server's own `process_resident_memory_bytes` from
its scrapes.

Owns turning sampler records in a window into a Series (values plus the device total, so a
ratio of total can be judged), and refusing the resident-memory stand-ins on a GPU target (the
manifest's `hardware.gpu`, or the target reporting device memory in use): there host memory says
nothing about device memory, so `memory_used` without NVML samples is no data. It does not
sample (`gate.observers.nvml_sampler`) or judge.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.metrics.measurements import Measurement, NoData, Series
from gate.metrics.window import Window, in_intervals, stage_intervals
from gate.rundir.sample_records import SampleRecords

if TYPE_CHECKING:
    from gate.gates.spec import Scope
    from gate.rundir.run import ProfileData

__all__ = ["gpu"]

_SERVER_RSS = "process_resident_memory_bytes"


def gpu(profile: ProfileData, metric: str, scope: Scope, window: Window) -> Measurement:
    samples = profile.gpu
    if not isinstance(samples, SampleRecords):
        samples = SampleRecords(records=list(samples or []))
    sources = np.array(samples.strings("source"), dtype=object)
    nvml = sources == "nvml"
    if metric == "memory_used" and not nvml.any():
        # Both stand-ins below are host memory; on a GPU target they would pass a device-memory
        # limit on the wrong memory, so fail closed instead.
        evidence = _gpu_evidence(profile)
        if evidence is not None:
            return NoData(reason=_not_device_memory(samples, sources, evidence))
    usable = nvml | (sources == "process_rss")
    if not usable.any():
        why = (
            f"the sampler could not sample: {samples[0].get('note') or 'no reason given'}"
            if len(samples)
            else "no gpu.jsonl sampler records"
        )
        if metric == "memory_used":
            return _server_rss(profile, scope, window, why)
        return NoData(reason=why)
    intervals = stage_intervals(profile, scope, window)
    field = "memory_used_bytes" if metric == "memory_used" else "utilization_ratio"
    # Columns (a run's 100k samples): a record without the field, or with null or a
    # non-number in it, reads as NaN and is left out below.
    times = samples.numbers("t")[usable]
    values = samples.numbers(field)[usable]
    totals = samples.numbers("memory_total_bytes")[usable]
    if intervals is not None:
        inside = in_intervals(times, intervals)
        values, totals = values[inside], totals[inside]
    keep = ~np.isnan(values)
    if not keep.any():
        return NoData(reason=f"no {field} in the sampler records of this window")
    note = (
        "process resident memory (no GPU/NVML)"
        if sources[np.argmax(usable)] == "process_rss"
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


def _not_device_memory(samples: SampleRecords, sources: np.ndarray, evidence: str) -> str:
    if (sources == "process_rss").any():
        had = "gpu.jsonl has only the server's resident memory (process_rss), no NVML samples"
    elif len(samples):
        had = f"gpu.jsonl has no NVML samples: {samples[0].get('note') or 'no reason given'}"
    else:
        had = "no gpu.jsonl sampler records"
    return (
        f"{had}; the target has a GPU ({evidence}), and the server's resident memory is not "
        "device memory: memory_used needs NVML samples in gpu.jsonl"
    )


def _gpu_evidence(profile: ProfileData) -> str | None:
    """What says the target runs on a GPU, or None. The manifest's `hardware` is the machine
    batchgate ran on (the bundled server's, or a local target's); a remote target is seen only
    through its scrapes, where the bundled server reports its allocator's device memory (0 on
    CPU). A target that shows neither (a remote vLLM on a GPU host, measured from a machine
    without one) cannot be told from a CPU one, and keeps the documented fallback."""
    if profile.hardware_gpu:
        return f"manifest.json hardware.gpu is {profile.hardware_gpu!r}"
    for scrape in profile.scrapes or []:
        used = (scrape.get("metrics") or {}).get("device_memory_used_bytes")
        if scrape.get("ok") and isinstance(used, int | float) and used > 0:
            return "the target reports device_memory_used_bytes > 0"
    return None
