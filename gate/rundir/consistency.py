"""Whether a profile's request records are the ones its load.json says the load wrote.

Owns the cross-checks a saved run allows, each made whenever its inputs are there: the records
against `counts_by_status` (their number and each status's), against `sent_requests` (records
with a send time), against `planned_requests` (no more records than planned), and the Parquet
stamp's word that the JSONL was cut or rewritten after the Parquet file was made
(`ProfileData.damage`, from `gate.rundir.parquet_stamp`). And the keys a load.json must hold for
its profile to be judged at all. A finding is a sentence for a verdict's reason; judging with it
is `gate.verdicts.context`'s. It does not read files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gate.rundir.run import ProfileData, RunData

__all__ = [
    "REQUIRED_LOAD_KEYS",
    "load_problem",
    "record_mismatch",
    "run_damage",
    "run_mismatches",
]

# What the load generator always writes and a judgement needs: how the load ended, whether it
# was a valid measurement, its window, and what it wrote (so lost records show).
REQUIRED_LOAD_KEYS = (
    "ended",
    "measurement_valid",
    "window",
    "planned_requests",
    "sent_requests",
    "counts_by_status",
)
_MIXED = "records of another load are mixed in"


def load_problem(load: dict[str, Any]) -> str | None:
    """Why a load.json cannot be judged (a key it must hold is missing), else None."""
    for key in REQUIRED_LOAD_KEYS:
        if key not in load:  # the load generator always writes it
            return f"load.json has no {key!r}: the measurement cannot be checked"
    return None


def record_mismatch(profile: ProfileData) -> str | None:
    """The first way the profile's records disagree with what load.json says was written."""
    requests = profile.requests
    if requests is None:
        return None
    if profile.damage:
        return profile.damage[0]
    load = profile.load or {}
    found = requests.n
    counted = load.get("counts_by_status")
    if isinstance(counted, dict):
        expected = sum(v for v in counted.values() if isinstance(v, int))
        if found != expected:
            why = "records were lost" if found < expected else _MIXED
            return f"the request records hold {found} requests, load.json counted {expected}: {why}"
        for status, count in sorted(counted.items()):
            held = int(requests.status.equals(status).sum())
            if isinstance(count, int) and held != count:
                return (
                    f"the request records hold {held} {status!r} requests, load.json counted "
                    f"{count}: the records were changed"
                )
    sent = load.get("sent_requests")
    if isinstance(sent, int):
        held = int(np.count_nonzero(~np.isnan(requests.sent_at)))
        if held != sent:
            why = "records were lost" if held < sent else _MIXED
            return (
                f"the request records hold {held} sent requests, load.json says {sent} were "
                f"sent: {why}"
            )
    planned = load.get("planned_requests")
    if isinstance(planned, int) and found > planned:
        return (
            f"the request records hold {found} requests, load.json says {planned} were "
            "planned: records of another load are mixed in"
        )
    return None


def run_damage(run: RunData) -> str | None:
    """Why no gate of a completed run can be judged: a manifest without the keys every run's
    has from its start, or a calibration.json with a field of the wrong type."""
    if run.manifest is not None:
        for key in ("ended", "profiles"):
            if key not in run.manifest:  # written at the start of every run
                return f"manifest.json has no {key!r}: the run cannot be checked"
    return None if run.calibration is None else run.calibration.problem


def run_mismatches(run: RunData) -> list[str]:
    """The run's damage (`run_damage`), then `profile: finding` for each profile whose records
    no longer match its load.json or whose load.json lacks a key a judgement needs."""
    found = []
    damage = run_damage(run)
    if damage is not None:
        found.append(damage)
    for name, profile in run.profiles.items():
        if profile.abort is not None or profile.load is None:
            continue  # judged by its abort record's view; a missing load.json is said as such
        mismatch = record_mismatch(profile) or load_problem(profile.load)
        if mismatch is not None:
            found.append(f"{name}: {mismatch}")
    return found
