"""Whether a `--target` is dead or only busy, judged while a profile's load runs.

Owns the rule (docs/run.md, "Busy is not dead"): the target is dead when it refuses
connections on `failures_for_dead` probes in a row, or when /health has failed that many times
in a row AND no answer byte has reached the load generator for `no_progress_seconds`. A slow or
failing /health while answers keep streaming in is a busy server: it is recorded (probes,
failures, latency) and never fatal. Progress is the load process's heartbeat,
`<profile>/progress.json` (`received_bytes`, written by `loadgen.locust.heartbeat`): the gate
reads the file, never loadgen's code (docs/architecture.md). It owns the summary of the probes
that goes into the manifest and the line the terminal prints. It does not probe the target
(`TargetClient.probe_health`) or stop anything (`gate.orchestrator.session`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HEARTBEAT_FILE", "HealthProbe", "Liveness", "read_received_bytes"]

HEARTBEAT_FILE = "progress.json"
# A probe slower than this counts as slow in the summary (and in the terminal line) even when
# it answered 200: a health check that takes a second is a sign of a saturated server.
SLOW_PROBE_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class HealthProbe:
    """One look at /health: answered 200, refused the connection, or failed otherwise."""

    ok: bool
    refused: bool
    latency_seconds: float
    detail: str  # "HTTP 200", "HTTP 503", "ReadTimeout", "ConnectError: ..."


def read_received_bytes(directory: Path) -> int | None:
    """The heartbeat's byte count, or None when there is none (yet) or it cannot be read."""
    try:
        data = json.loads((directory / HEARTBEAT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("received_bytes") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Liveness:
    def __init__(
        self,
        *,
        failures_for_dead: int,
        no_progress_seconds: float,
        started_at: float,
    ) -> None:
        if failures_for_dead < 1 or not no_progress_seconds > 0:
            raise ValueError("failures_for_dead must be >= 1 and no_progress_seconds > 0")
        self.failures_for_dead = failures_for_dead
        self.no_progress_seconds = no_progress_seconds
        self._received: int | None = None
        self._progress_at = started_at  # the load starting counts as the last sign of life
        self._progress_seen = 0
        self._failed_streak = 0
        self._refused_streak = 0
        self._latencies: list[float] = []
        self._failed = 0
        self._refused = 0
        self._last_failure = ""

    def progress(self, received_bytes: int | None, now: float) -> None:
        """Note the heartbeat's count; a count that grew is progress."""
        if received_bytes is None:
            return
        if self._received is None or received_bytes > self._received:
            if received_bytes > 0:
                self._progress_at = now
                self._progress_seen += 1
            self._received = received_bytes

    def observe(self, probe: HealthProbe, now: float) -> str | None:
        """Record one probe; the reason the target is dead, or None while it is not."""
        self._latencies.append(probe.latency_seconds)
        if probe.ok:
            self._failed_streak = self._refused_streak = 0
            return None
        self._failed += 1
        self._failed_streak += 1
        self._last_failure = probe.detail
        if probe.refused:
            self._refused += 1
            self._refused_streak += 1
            if self._refused_streak >= self.failures_for_dead:
                return (
                    f"it refused connections {self._refused_streak} times in a row ({probe.detail})"
                )
        else:
            self._refused_streak = 0
        quiet = now - self._progress_at
        if self._failed_streak >= self.failures_for_dead and quiet >= self.no_progress_seconds:
            return (
                f"/health failed {self._failed_streak} times in a row (last: {probe.detail}) "
                f"and no answer byte arrived for {quiet:.0f} s (limit "
                f"{self.no_progress_seconds:g} s)"
            )
        return None

    def summary(self) -> dict[str, Any]:
        """What the manifest keeps (observers.<profile>.liveness)."""
        lat = sorted(self._latencies)
        return {
            "health_probes": len(lat),
            "health_failed": self._failed,
            "health_refused": self._refused,
            "health_slow": sum(1 for x in lat if x >= SLOW_PROBE_SECONDS),
            "health_latency_p50_seconds": _quantile(lat, 0.5),
            "health_latency_max_seconds": round(lat[-1], 4) if lat else None,
            "last_failure": self._last_failure or None,
            "progress_seen": self._progress_seen,
            "no_progress_seconds_for_dead": self.no_progress_seconds,
        }

    def busy_line(self, profile: str) -> str | None:
        """The terminal's note when /health was slow or failing but the target was not dead."""
        s = self.summary()
        if not s["health_failed"] and not s["health_slow"]:
            return None
        return (
            f"batchgate: {profile}: /health was slow or failing under load ({s['health_failed']} "
            f"of {s['health_probes']} probes failed, {s['health_slow']} took >= "
            f"{SLOW_PROBE_SECONDS:g} s, max {s['health_latency_max_seconds']} s) while answers "
            "kept arriving: busy, not dead (recorded in manifest.json)"
        )


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    index = min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))
    return round(values[index], 4)
