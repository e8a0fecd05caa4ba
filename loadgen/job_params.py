"""The offline_job profile's Batch API job parameters: their defaults and their validation.

Owns the `job_*` keys of the `offline_job` profile (how big the job is, when it is sent, how
long the load waits for it) and the chat stages they imply (`before_job`, `during_job`), so the
profile catalogue stays a catalogue; the job itself is sent by `loadgen.batch_job`.
"""

from __future__ import annotations

from typing import Any

from loadgen.errors import ConfigError
from loadgen.lengths import LengthDist
from loadgen.shapes import RateStage

__all__ = ["job_defaults", "job_stages", "scale_job_lines", "validate_job_params"]


def job_defaults(prompt_tokens: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_lines": 2000,  # scaled like durations (smoke 100, quick 500) unless duration set
        "job_submit_at_ratio": 0.25,  # of the chat schedule's duration
        "job_wait_seconds": 600.0,  # after the chat schedule ends, before giving up polling
        "job_poll_seconds": 0.5,
        "job_completion_window": "24h",
        "job_prompt_tokens": prompt_tokens,
        "job_output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
    }


def validate_job_params(p: dict[str, Any]) -> None:
    """Raise ConfigError naming the key for a job parameter no job could be sent with."""
    if isinstance(p["job_lines"], bool) or not isinstance(p["job_lines"], int | float):
        raise ConfigError(f"job_lines must be an integer >= 1, got {p['job_lines']!r}")
    if int(p["job_lines"]) < 1:
        raise ConfigError(f"job_lines must be >= 1, got {p['job_lines']}")
    if not 0.0 <= float(p["job_submit_at_ratio"]) <= 1.0:
        raise ConfigError(
            f"job_submit_at_ratio must be within [0, 1], got {p['job_submit_at_ratio']}"
        )
    if float(p["job_wait_seconds"]) < 0:
        raise ConfigError(f"job_wait_seconds must be >= 0, got {p['job_wait_seconds']}")
    if float(p["job_poll_seconds"]) <= 0:
        raise ConfigError(f"job_poll_seconds must be > 0, got {p['job_poll_seconds']}")
    LengthDist.from_value(p["job_prompt_tokens"])  # validated here, at the edge
    LengthDist.from_value(p["job_output_tokens"])


def scale_job_lines(params: dict[str, Any], factor: float) -> None:
    """A smaller job at smoke/quick scale, so it fits the shorter chat window (in place)."""
    job_lines = params.get("job_lines")
    if isinstance(job_lines, int | float) and not isinstance(job_lines, bool) and job_lines >= 1:
        params["job_lines"] = max(1, round(float(job_lines) * factor))


def job_stages(p: dict[str, Any]) -> list[RateStage]:
    """The chat schedule split at the job's planned submit time, same rate on both sides.

    `loadgen.batch_job` submits at `job_submit_at_ratio` x the schedule's duration, which is
    where `during_job` starts: every chat record says whether it was sent before the job or
    while it was (meant to be) running, so a ratio gate can compare the two in one run. A ratio
    of 0 or 1 leaves one stage (a stage cannot be empty).
    """
    total, ratio = float(p["main_seconds"]), float(p["job_submit_at_ratio"])
    parts = (("before_job", total * ratio), ("during_job", total - total * ratio))
    rate = p["base_rate_rps"]
    return [
        RateStage(name=name, duration_seconds=seconds, rate_rps=rate)
        for name, seconds in parts
        if seconds > 0
    ]
