"""How many Locust worker processes the load generator runs: a number, or `auto`.

Owns the `--workers` value (`WorkerCount`: a whole number >= 1, or AUTO), its parsing with the
message a user reads, and the ceiling `auto` may grow to (the CPUs this process may run on). With
`auto` the calibration's capacity sweep starts with one worker and doubles the workers whenever
the load generator saturates, up to the ceiling (`gate.orchestrator.capacity_sweep`); the run's
profiles then use the count the capacity was measured with (calibration.json `client.capacity.
workers`). It does not start processes (`gate.orchestrator.session`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

from gate.calibration.content import Calibration
from gate.orchestrator.session import SessionSettings

__all__ = [
    "AUTO",
    "WorkerCount",
    "auto_ceiling",
    "auto_entry",
    "auto_message",
    "auto_workers",
    "parse_workers",
]

AUTO: Literal["auto"] = "auto"
WorkerCount = int | Literal["auto"]


def parse_workers(text: str) -> WorkerCount:
    """`--workers`' value; ValueError with the message a user reads."""
    value = text.strip()
    if value == AUTO:
        return AUTO
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"--workers must be a whole number >= 1 or auto, got {text!r}") from None
    if count < 1:
        raise ValueError(f"--workers must be >= 1 or auto, got {count}")
    return count


def auto_ceiling() -> int:
    """The most workers `auto` starts: one per CPU this process may run on. A worker is one
    single-threaded process, so more of them than CPUs adds no sending capacity; on a machine
    that also runs the target they share those CPUs with it (docs/loadgen.md)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def auto_workers(settings: SessionSettings, calibration: Calibration | None) -> SessionSettings:
    """`settings` under `--workers auto`: before the calibration (None) one worker that the
    capacity sweep may double up to the ceiling; after it, the count the capacity was measured
    with (calibration.json `client.capacity.workers`; 1 where the file does not say)."""
    workers = (None if calibration is None else calibration.capacity_workers()) or 1
    # A reused calibration may have needed more workers than this machine's ceiling: it did.
    ceiling = max(settings.max_load_workers or auto_ceiling(), workers)
    return dataclasses.replace(settings, load_workers=workers, max_load_workers=ceiling)


def auto_entry(settings: SessionSettings) -> dict[str, Any]:
    """manifest.json `load_workers` of a `--workers auto` run."""
    return {"requested": AUTO, "used": settings.load_workers, "ceiling": settings.max_load_workers}


def auto_message(settings: SessionSettings) -> str:
    """The line a `--workers auto` run prints before its profiles."""
    return (
        f"batchgate: --workers auto: {settings.load_workers} load-generator worker(s), as the "
        "calibration's capacity step ran"
    )
