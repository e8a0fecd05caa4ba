"""A profile's data clipped to one time interval, so `gate.metrics.derive` measures it per bin.

Owns cutting a `ProfileData` down to the requests sent in an interval (with their ITL gaps),
the step records, scrapes and sampler records observed in it, and a load.json whose window is
that interval (no warm-up). Handing such a slice to `gate.metrics.derive.measure` is how the report
gets time series without a second copy of any formula. It does not know which metric is measured.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from batchgate_records.schema import CATEGORICAL_FIELDS, FLOAT_FIELDS, OPTIONAL_FLOAT_FIELDS
from gate.rundir.requests import Categorical, RequestColumns
from gate.rundir.run import ProfileData, StepColumns
from gate.rundir.step_records import STEP_FIELDS

__all__ = ["clip_profile"]

# Every per-request and per-step column the run directory reader builds.
_REQUEST_ARRAYS = FLOAT_FIELDS
_REQUEST_CATEGORICALS = CATEGORICAL_FIELDS
_STEP_ARRAYS = STEP_FIELDS


def _requests(req: RequestColumns, mask: np.ndarray) -> RequestColumns:
    values: dict[str, Any] = {name: getattr(req, name)[mask] for name in _REQUEST_ARRAYS}
    for name in OPTIONAL_FLOAT_FIELDS:  # reasoning times, probe marks (None: not read)
        if getattr(req, name) is not None:
            values[name] = getattr(req, name)[mask]
    for name in _REQUEST_CATEGORICALS:
        column: Categorical = getattr(req, name)
        values[name] = Categorical(codes=column.codes[mask], names=column.names)
    values["itl_seconds"] = req.itl_seconds[np.repeat(mask, req.itl_counts)]
    values["itl_counts"] = req.itl_counts[mask]
    return dataclasses.replace(req, **values)


def _steps(steps: StepColumns, low_wall: float, high_wall: float) -> StepColumns:
    mask = (steps.t >= low_wall) & (steps.t < high_wall)
    values: dict[str, Any] = {name: getattr(steps, name)[mask] for name in _STEP_ARRAYS}
    values["num_waiting"] = {c: v[mask] for c, v in steps.num_waiting.items()}
    values["num_running"] = {c: v[mask] for c, v in steps.num_running.items()}
    return dataclasses.replace(steps, **values)


def _records_in(
    records: list[dict[str, Any]] | None, low_wall: float, high_wall: float
) -> list[dict[str, Any]] | None:
    if records is None:
        return None
    kept = []
    for record in records:
        t = record.get("t")
        if isinstance(t, (int, float)) and low_wall <= t < high_wall:
            kept.append(record)
    return kept


def clip_profile(profile: ProfileData, *, start: float, end: float) -> ProfileData:
    """Everything of `profile` that happened in [start, end) (request-record seconds).

    Requests are kept by `sent_at`; observer records by their wall-clock `t`, converted with
    load.json's clock anchor (without one, observer records are dropped: they cannot be placed).
    """
    requests = None
    window_start = start
    if profile.requests is not None:
        sent = profile.requests.sent_at
        mask = (sent >= start) & (sent < end)
        requests = _requests(profile.requests, mask)
        if requests.n:
            # derive keeps requests planned inside the window: a late send must still count.
            window_start = min(start, float(np.nanmin(requests.planned_at)))
    low_wall, high_wall = profile.to_wall(start), profile.to_wall(end)
    if low_wall is None or high_wall is None:
        steps, scrapes, gpu = None, None, None
    else:
        steps = None if profile.steps is None else _steps(profile.steps, low_wall, high_wall)
        scrapes = _records_in(profile.scrapes, low_wall, high_wall)
        gpu = _records_in(profile.gpu, low_wall, high_wall)
    load = dict(profile.load or {})
    load["window"] = {"start": window_start, "end": end, "warmup_seconds": 0.0}
    return dataclasses.replace(
        profile, load=load, requests=requests, steps=steps, scrapes=scrapes, gpu=gpu
    )
