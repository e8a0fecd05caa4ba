"""The `trace` profile: a window of a production trace, scaled, as the requests to replay.

Owns turning the profile's trace parameters (`path`, `format`, `start_seconds`,
`duration_seconds`, `time_scale`, `length_scale`, `max_input_tokens`, `max_output_tokens`,
`context_tokens`) into a `Replay`: every request of the window with its send offset, its prompt
and answer lengths after scaling and clamping, and how many were clamped. By default the clamp is
the target's context (`context_tokens`, which `batchgate load` reads from the target), so a
scaled trace never turns into a stream of 400s. `time_scale` is a speed-up factor (2 = twice as
fast) or `{"output_tokens_per_second": R}`, what `batchgate run` resolves "0.5x capacity" to: the
factor that makes the window's mean output-token rate R. Prompt text comes from
`loadgen.prefix_text` (equal leading hash ids = the same leading text). It does not send
anything or know Locust; the whole trace file is validated before anything is planned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError
from loadgen.traces import (
    TraceRequest,
    packaged_trace_path,
    read_trace,
    scale_lengths,
    scale_time,
    select_window,
    time_scale_for_rate,
)

__all__ = ["DEFAULT_TRACE", "TEMPLATE_MARGIN_TOKENS", "Replay", "build_replay", "window_line"]

DEFAULT_TRACE = "mooncake_conversation_excerpt.jsonl"
# Tokens a chat template adds around the prompt (role markers, BOS): kept free of the context
# so a clamped prompt plus its answer still fits.
TEMPLATE_MARGIN_TOKENS = 32
# Prompt vocabularies whose token counts are not known to be exact (loadgen.prefix_text).
APPROXIMATE_TOKENIZERS = ("words", "auto", None)


@dataclass(frozen=True, kw_only=True)
class Replay:
    """The window as it will be sent: offsets in seconds from the run's start."""

    path: str
    format: str
    requests: tuple[TraceRequest, ...]
    duration_seconds: float  # the window's wall-clock length at `time_scale`
    time_scale: float
    input_clamped: int
    output_clamped: int
    max_input_tokens: int | None
    max_output_tokens: int | None

    def summary(self) -> dict[str, Any]:
        """load.json's `trace` section (docs/records.md)."""
        outputs = sum(r.output_tokens for r in self.requests)
        return {
            "path": self.path,
            "format": self.format,
            "requests": len(self.requests),
            "time_scale": self.time_scale,
            "duration_seconds": self.duration_seconds,
            "offered_output_tokens_per_second": outputs / self.duration_seconds,
            "max_input_tokens": self.max_input_tokens,
            "max_output_tokens": self.max_output_tokens,
            "input_clamped": self.input_clamped,
            "output_clamped": self.output_clamped,
        }


def _count_or_none(params: Mapping[str, Any], key: str) -> int | None:
    value = params[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ConfigError(f"{key} must be an integer >= 1 or null, got {value!r}")
    if value < 1:
        raise ConfigError(f"{key} must be an integer >= 1 or null, got {value!r}")
    return int(value)


def _time_scale(value: Any, window: Any) -> float:
    if isinstance(value, Mapping):
        rate = value.get("output_tokens_per_second")
        if (
            set(value) != {"output_tokens_per_second"}
            or isinstance(rate, bool)
            or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0)
        ):
            raise ConfigError(
                f"time_scale must be a number or {{output_tokens_per_second: R > 0}}, got {value!r}"
            )
        return time_scale_for_rate(window, float(rate))
    if isinstance(value, str):
        raise ConfigError(
            f'time_scale {value!r}: a relative time scale ("0.5x capacity") needs the '
            "target's calibration: use it in `batchgate run`; `batchgate load` takes a number"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"time_scale must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"time_scale must be > 0, got {value!r}")
    return float(value)


def build_replay(params: Mapping[str, Any], *, default_window_seconds: float) -> Replay:
    """The replay the trace profile's `params` describe; ConfigError naming the key otherwise."""
    path = params["path"]
    if path is None:
        path = str(packaged_trace_path(DEFAULT_TRACE))
    elif not isinstance(path, str) or not path:
        raise ConfigError(f"path must be a trace file's path, got {path!r}")
    trace = read_trace(path, params["format"])
    duration = params["duration_seconds"]
    window = select_window(
        trace,
        params["start_seconds"],
        default_window_seconds if duration is None else duration,
    )
    length_scale = params["length_scale"]
    max_input = _count_or_none(params, "max_input_tokens")
    max_output = _count_or_none(params, "max_output_tokens")
    context = _count_or_none(params, "context_tokens")
    if context is not None:
        # An answer may take at most half the context; the prompt gets what the longest
        # answer leaves, less the chat template's few tokens.
        half = max(context // 2, 1)
        max_output = half if max_output is None else min(max_output, half)
        outputs = scale_lengths(window.requests, length_scale, None, max_output).requests
        room = context - max(r.output_tokens for r in outputs) - TEMPLATE_MARGIN_TOKENS
        if params["tokenizer"] in APPROXIMATE_TOKENIZERS:
            # Unverified word units may each take more than one token on the target (a toy
            # 1024-token BPE took 1.7 on average): keep the prompt to half the room.
            room //= 2
        if room < 1:
            raise ConfigError(
                f"context_tokens {context} leaves no room for a prompt beside answers of up to "
                f"{max(r.output_tokens for r in outputs)} tokens: lower max_output_tokens"
            )
        max_input = room if max_input is None else min(max_input, room)
    scaled = scale_lengths(window.requests, length_scale, max_input, max_output)
    window = type(window)(
        requests=scaled.requests,
        start_seconds=window.start_seconds,
        duration_seconds=window.duration_seconds,
    )
    factor = _time_scale(params["time_scale"], window)
    timed = scale_time(window, factor)
    return Replay(
        path=str(path),
        format=trace.format,
        requests=timed.requests,
        duration_seconds=timed.duration_seconds,
        time_scale=factor,
        input_clamped=scaled.input_clamped,
        output_clamped=scaled.output_clamped,
        max_input_tokens=max_input,
        max_output_tokens=max_output,
    )


def window_line(request: TraceRequest) -> dict[str, Any]:
    """One line of `<profile>/trace.jsonl` (our jsonl trace format, as replayed: seconds from
    the run's start, lengths after scaling and clamping), plus the original line's index."""
    line: dict[str, Any] = {
        "timestamp": round(request.timestamp_seconds, 6),
        "input_tokens": request.input_tokens,
        "output_tokens": request.output_tokens,
        "hash_ids": list(request.hash_ids),
    }
    if request.hash_ids:
        line["block_tokens"] = request.block_tokens
    if request.session is not None:
        line["session"] = request.session
    line["trace_index"] = request.index
    return line
