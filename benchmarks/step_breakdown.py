"""Where a saturated run's wall time went, from the engine's own step records.

`bench_server.py` compares HTTP streaming with the offline engine by tokens per second; this
splits each side's wall time into what the engine computed (the forward passes), what it spent
between steps (reading commands, sending outputs, scheduling outside the step), and the edges (the
start before the first step and the end after the last: request delivery, the last chunks'
trip). With the same work on both sides, a lower HTTP ratio then shows up as slower forwards
(another process sharing the machine's cores and caches), longer gaps (per-step overhead of the
serving loop) or longer edges (admission and delivery), instead of one unexplained number.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

__all__ = ["breakdown", "fetch_steps", "latest_seq", "side_by_side"]


def breakdown(records: Sequence[Mapping[str, Any]], elapsed: float, full_batch: int) -> dict:
    """The split of `elapsed` seconds over the steps in `records` (docs/records.md step fields);
    steps that ran no sequence (idle wake-ups) are left out."""
    steps = [r for r in records if r["num_seqs"] > 0]
    if not steps:
        return {"steps": 0}
    span = steps[-1]["start_time"] + steps[-1]["duration_seconds"] - steps[0]["start_time"]
    in_steps = sum(r["duration_seconds"] for r in steps)
    full = [r["forward_seconds"] for r in steps if r["num_seqs"] == full_batch]
    return {
        "steps": len(steps),
        "forward_seconds": sum(r["forward_seconds"] for r in steps),
        "in_steps_seconds": in_steps,
        "between_steps_seconds": span - in_steps,
        "edges_seconds": elapsed - span,
        "full_step_forward_ms_median": statistics.median(full) * 1e3 if full else None,
        "mean_num_seqs": statistics.mean(r["num_seqs"] for r in steps),
    }


def latest_seq(url: str) -> int:
    """The newest step's `seq` (0 before the first step): pass it to `fetch_steps` after a run."""
    response = httpx.get(f"{url}/admin/steps", params={"limit": 1}, timeout=10)
    response.raise_for_status()
    return int(response.json()["latest_seq"])


def fetch_steps(url: str, after: int) -> list[dict[str, Any]]:
    """Every step record after `after`; raises if the server's ring buffer already dropped some
    (a breakdown of part of a run would mislead)."""
    records: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=10) as http:
        while True:
            response = http.get("/admin/steps", params={"after": after, "limit": 10_000})
            response.raise_for_status()
            page = response.json()
            if page["missed"]:
                missed = page["missed"]
                raise RuntimeError(f"{missed} step records were evicted; raise --step-log-size")
            if not page["records"]:
                return records
            records.extend(page["records"])
            after = records[-1]["seq"]


def side_by_side(offline: Mapping[str, Any], http: Mapping[str, Any], key: str, form: str) -> str:
    """One breakdown value of two runs (their "steps"), as "offline / http"; "-" if absent."""

    def one(run: Mapping[str, Any]) -> str:
        value = run.get("steps", {}).get(key)
        return "-" if value is None else form.format(value)

    return f"{one(offline)} / {one(http)}"
