"""`<profile>/abort.json`: the record of an `abort_on_fail` gate stopping a run (docs/records.md).

Owns what the record says — which gate stopped which profile, when (seconds after the load
process started, and the grace period then in force), how many complete lines of each growing
file the deciding check read, the profile's warm-up and a clock anchor it used (load.json is not
written yet while a load runs), and the verdict as judged then — plus writing and reading it and
the stand-in for load.json that the deciding check used. With the line counts, a later reader
sees exactly what the check saw, so `batchgate check` judges the same failure again. It does
not decide anything (`gate.verdicts.evaluate`, `gate.verdicts.judge`) or read the record files
(`gate.rundir.run`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "ABORT_FILE",
    "ABORT_SCHEMA_VERSION",
    "SNAPSHOT_FILES",
    "AbortRecord",
    "AbortRecordError",
    "read_abort",
    "write_abort",
]

ABORT_FILE = "abort.json"
ABORT_SCHEMA_VERSION = 1
# The files a profile's gates read, in the order the deciding check counted their lines.
SNAPSHOT_FILES = ("requests.jsonl", "steps.jsonl", "scrapes.jsonl", "gpu.jsonl")


class AbortRecordError(BatchgateError, ValueError):
    """An abort.json that cannot be read; the message names the file and the field."""

    default_exit_code = ExitCode.NO_DATA


@dataclass(frozen=True, kw_only=True)
class AbortRecord:
    gate: str
    profile: str
    elapsed_seconds: float  # since the load process started
    grace_seconds: float
    lines: dict[str, int]  # complete lines of each SNAPSHOT_FILES entry the check read
    warmup_seconds: float | None  # the profile's own warm-up (load.json's, once written)
    monotonic_at_check: float  # clock anchor: the run's monotonic clock ...
    wall_at_check: float  # ... and the wall clock at the same moment
    verdict: dict[str, Any] = field(default_factory=dict)  # as judged then, for people

    @property
    def verdict_id(self) -> str:
        return f"{self.gate}@{self.profile}"

    @property
    def samples(self) -> int:
        n = self.verdict.get("n")
        return int(n) if isinstance(n, int) else 0

    def describe(self) -> str:
        """'ttft_p50@steady: ttft p50 12.5ms vs < 1ms after 9 samples, 3.1 s into the load'."""
        from gate.units import UnitKind, format_value  # local: only people read this

        v = self.verdict
        try:
            value = format_value(v.get("value"), UnitKind(v.get("unit")))
        except ValueError:
            value = str(v.get("value"))
        return (
            f"{self.verdict_id}: {v.get('metric')} {v.get('statistic')} {value} vs "
            f"{v.get('threshold')} after {self.samples} samples, "
            f"{self.elapsed_seconds:.1f} s into the load"
        )

    def load_standin(self) -> dict[str, Any]:
        """What the deciding check used in place of load.json: no window bounds (the records'
        own span), the profile's warm-up, and a clock anchor for the observers' wall clock."""
        return {
            "window": {"warmup_seconds": self.warmup_seconds},
            "clock": {
                "monotonic_at_start": self.monotonic_at_check,
                "wall_at_start": self.wall_at_check,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": ABORT_SCHEMA_VERSION,
            "gate": self.gate,
            "profile": self.profile,
            "elapsed_seconds": self.elapsed_seconds,
            "grace_seconds": self.grace_seconds,
            "lines": dict(self.lines),
            "warmup_seconds": self.warmup_seconds,
            "clock": {"monotonic": self.monotonic_at_check, "wall": self.wall_at_check},
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = ABORT_FILE) -> AbortRecord:
        def number(value: Any, key: str, *, optional: bool = False) -> float | None:
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise AbortRecordError(f"{where}: {key} must be a number")
            if not math.isfinite(value):
                raise AbortRecordError(f"{where}: {key} must be finite")
            return float(value)

        if data.get("schema_version") != ABORT_SCHEMA_VERSION:
            raise AbortRecordError(
                f"{where}: schema_version {data.get('schema_version')!r} is not "
                f"{ABORT_SCHEMA_VERSION}"
            )
        gate, profile = data.get("gate"), data.get("profile")
        if not isinstance(gate, str) or not isinstance(profile, str):
            raise AbortRecordError(f"{where}: gate and profile must be strings")
        lines = data.get("lines")
        if not isinstance(lines, dict) or set(lines) != set(SNAPSHOT_FILES):
            raise AbortRecordError(f"{where}: lines must name exactly {', '.join(SNAPSHOT_FILES)}")
        for name, count in lines.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise AbortRecordError(f"{where}: lines.{name} must be an integer >= 0")
        clock = data.get("clock")
        if not isinstance(clock, dict):
            raise AbortRecordError(f"{where}: clock must be an object")
        verdict = data.get("verdict")
        return cls(
            gate=gate,
            profile=profile,
            elapsed_seconds=number(data.get("elapsed_seconds"), "elapsed_seconds") or 0.0,
            grace_seconds=number(data.get("grace_seconds"), "grace_seconds") or 0.0,
            lines={name: int(lines[name]) for name in SNAPSHOT_FILES},
            warmup_seconds=number(data.get("warmup_seconds"), "warmup_seconds", optional=True),
            monotonic_at_check=number(clock.get("monotonic"), "clock.monotonic") or 0.0,
            wall_at_check=number(clock.get("wall"), "clock.wall") or 0.0,
            verdict=verdict if isinstance(verdict, dict) else {},
        )


def write_abort(directory: Path, record: AbortRecord) -> Path:
    path = Path(directory) / ABORT_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record.to_dict(), indent=2, allow_nan=False) + "\n", "utf-8")
    os.replace(tmp, path)  # readers never see half a record
    return path


def read_abort(directory: Path) -> AbortRecord | None:
    """The profile's abort record, None when it has none; AbortRecordError when unreadable."""
    path = Path(directory) / ABORT_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AbortRecordError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AbortRecordError(f"{path}: expected a JSON object")
    return AbortRecord.from_dict(data, where=str(path))
