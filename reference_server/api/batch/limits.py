"""The Batch API's limits and the completion-window syntax.

Owns `BatchLimits` (the `--batch-*` and `--data-dir` figures, taken from `ServerConfig`), the
refusal each limit produces (an `APIError` whose message names the flag), and
`parse_completion_window`. OpenAI accepts only "24h"; this server also takes shorter windows in
hours, minutes or seconds ("1h", "30m", "90s") so tests and demos can watch a job expire. It
knows nothing about storage or the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reference_server.api.errors import APIError
from reference_server.api.server_config import ServerConfig

__all__ = ["ENDPOINTS", "BatchLimits", "limit_error", "parse_completion_window"]

# The endpoints a job may target: the ones this server serves.
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
_WINDOW = re.compile(r"^([1-9][0-9]{0,6})([hms])$")
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


@dataclass(frozen=True, kw_only=True)
class BatchLimits:
    max_inflight: int | None  # None: from the live batching settings (inflight_bound)
    max_file_lines: int
    max_file_bytes: int
    max_line_bytes: int
    max_requests_per_job: int
    max_completion_window_seconds: float
    retention_seconds: float

    @classmethod
    def from_config(cls, config: ServerConfig) -> BatchLimits:
        return cls(
            max_inflight=config.batch_max_inflight,
            max_file_lines=config.batch_max_file_lines,
            max_file_bytes=config.batch_max_file_bytes,
            max_line_bytes=config.batch_max_line_bytes,
            max_requests_per_job=config.batch_max_requests_per_job,
            max_completion_window_seconds=config.batch_max_completion_window_seconds,
            retention_seconds=config.batch_retention_seconds,
        )

    def inflight_bound(self, batching: dict[str, Any]) -> int:
        """Lines a job may have in the engine, from the live batching settings."""
        if self.max_inflight is not None:
            return self.max_inflight
        # Every sequence slot, plus as many again waiting in the engine's batch queue: a lone
        # job keeps the engine full (the engine starts the next line the step a slot frees,
        # not after an event-loop round trip), and waiting batch lines never delay interactive
        # requests, which are admitted first. Never more than the job class's queue holds.
        queue = batching[batching.get("batch_api_priority", "batch")]
        return max(1, min(2 * int(batching["max_num_seqs"]), int(queue["max_waiting"])))


def limit_error(
    *, param: str, code: str, message: str, flag: str, limit: float, status_code: int = 400
) -> APIError:
    """A refusal that names the limit and the flag that sets it."""
    shown = int(limit) if float(limit).is_integer() else limit
    return APIError(
        status_code,
        f"{param}: {message} (limit {shown}, set by {flag})",
        param=param,
        code=code,
    )


def parse_completion_window(value: object, limits: BatchLimits) -> float:
    """Seconds of a completion_window such as "24h", "30m" or "90s"."""
    if not isinstance(value, str):
        raise APIError.invalid(
            "completion_window", 'must be a string such as "24h"', code="invalid_value"
        )
    match = _WINDOW.match(value)
    if match is None:
        raise APIError.invalid(
            "completion_window",
            f'must be a whole number of hours, minutes or seconds such as "24h", "30m", "90s"; '
            f"got {value!r}",
        )
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > limits.max_completion_window_seconds:
        raise limit_error(
            param="completion_window",
            code="completion_window_too_long",
            message=f"{value} is longer than this server allows",
            flag="--batch-max-completion-window-seconds",
            limit=limits.max_completion_window_seconds,
        )
    return float(seconds)
