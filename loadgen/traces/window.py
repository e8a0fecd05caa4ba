"""Cutting a replay window out of a trace and rescaling it: time, prompt and answer lengths.

Owns `TraceWindow` (the requests of `[start, start + duration)` re-based to start at 0, and the
window's duration), `select_window`, `scale_time` / `time_scale_for_rate` and `scale_lengths`.
`time_scale` is a speed-up factor: 2.0 replays twice as fast (timestamps and duration divided by
2), 0.5 at half speed. All functions are pure and return new values. It does not read files
(`loadgen.traces.formats`), know the target's capacity (the caller turns "0.5x capacity" into a
rate and passes it to `time_scale_for_rate`) nor send anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from loadgen.errors import ConfigError
from loadgen.traces.request import Trace, TraceRequest

__all__ = [
    "ScaledLengths",
    "TraceWindow",
    "scale_lengths",
    "scale_time",
    "select_window",
    "time_scale_for_rate",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceWindow:
    """Requests of one window, timestamps from the window's start (not its first request).

    `duration_seconds` is the replay's length: the duration asked for, cut at the trace's last
    request when the window runs past it (a tail with no traffic in the trace is no traffic to
    replay, and counting it would understate the window's rate).
    """

    requests: tuple[TraceRequest, ...]
    start_seconds: float  # in the trace's own time, before any time_scale
    duration_seconds: float

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScaledLengths:
    requests: tuple[TraceRequest, ...]
    input_clamped: int  # requests whose scaled prompt was cut to max_input_tokens
    output_clamped: int  # requests whose scaled answer was cut to max_output_tokens


def _positive(name: str, value: object, *, zero_ok: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero_ok)
    ):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigError(f"{name}: must be a finite number {bound}, got {value!r}")
    return float(value)


def select_window(trace: Trace, start_seconds: float, duration_seconds: float) -> TraceWindow:
    """Requests with start <= t < start + duration, re-based so the window starts at 0."""
    start = _positive("start_seconds", start_seconds, zero_ok=True)
    duration = _positive("duration_seconds", duration_seconds)
    span = trace.span_seconds
    where = f"the trace {trace.path} spans 0 to {span:g} s"
    if start > span:
        raise ConfigError(f"start_seconds: {start:g} is beyond the last request ({where})")
    end = start + duration
    chosen = tuple(
        replace(r, timestamp_seconds=r.timestamp_seconds - start)
        for r in trace.requests
        if start <= r.timestamp_seconds < end
    )
    if not chosen:
        raise ConfigError(
            f"start_seconds, duration_seconds: the window {start:g} to {end:g} s holds no "
            f"request ({where})"
        )
    # Cut at the trace's last request, but never to 0 (a window starting on that last instant
    # keeps the duration asked for).
    kept = min(duration, span - start) or duration
    return TraceWindow(requests=chosen, start_seconds=start, duration_seconds=kept)


def scale_time(window: TraceWindow, time_scale: float) -> TraceWindow:
    """The window replayed `time_scale` times faster: timestamps and duration divided by it."""
    factor = _positive("time_scale", time_scale)
    return TraceWindow(
        requests=tuple(
            replace(r, timestamp_seconds=r.timestamp_seconds / factor) for r in window.requests
        ),
        start_seconds=window.start_seconds,
        duration_seconds=window.duration_seconds / factor,
    )


def time_scale_for_rate(window: TraceWindow, target_output_tokens_per_second: float) -> float:
    """The time_scale that makes the window's mean output-token rate equal the target.

    Mean rate = the window's output tokens / its duration; call it on the window as it will be
    sent, after `scale_lengths` (which changes the output tokens).
    """
    target = _positive("target_output_tokens_per_second", target_output_tokens_per_second)
    rate = window.output_tokens / window.duration_seconds
    return target / rate


def _scaled_input(request: TraceRequest, scale: float, block_tokens: int) -> int:
    """round(input * scale), nudged so each hash block keeps its share of the prompt.

    Scaling the total and the block size separately rounds differently: 14 full blocks of 512
    at 0.3 give 2150 tokens but 14 blocks of 154 = 2156, which would turn the last full block
    (cacheable) into a partial one (not cached). So full blocks stay full and a partial last
    block stays partial; the nudge is at most a few tokens.
    """
    target = max(1, round(request.input_tokens * scale))
    old_block = request.block_tokens
    if not request.hash_ids or old_block is None:
        return target
    blocks = min(len(request.hash_ids), math.ceil(request.input_tokens / old_block))
    full = min(blocks, request.input_tokens // old_block)
    if blocks > full and block_tokens > 1:  # the last hash block is partial: keep it so
        low, high = full * block_tokens + 1, blocks * block_tokens - 1
    elif request.input_tokens > blocks * old_block:  # unshared tokens follow the hash blocks
        low, high = blocks * block_tokens, target
    else:  # the hash blocks cover the prompt exactly
        low = high = blocks * block_tokens
    return min(max(target, low), max(high, low))


def scale_lengths(
    requests: Sequence[TraceRequest],
    length_scale: float,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
) -> ScaledLengths:
    """Prompt and answer lengths times `length_scale` (rounded, at least 1), then clamped.

    `block_tokens` is scaled with them (rounded, at least 1), so a hash block covers the same
    share of the prompt; hash ids beyond the scaled prompt (min(len(hash_ids),
    ceil(input_tokens / block_tokens)) are kept) are dropped, also when the prompt is clamped.
    """
    scale = _positive("length_scale", length_scale)
    limits = (("max_input_tokens", max_input_tokens), ("max_output_tokens", max_output_tokens))
    for name, limit in limits:
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigError(f"{name}: must be an integer >= 1 or null, got {limit!r}")
    scaled = []
    input_clamped = output_clamped = 0
    for request in requests:
        block_tokens = request.block_tokens
        if block_tokens is not None:
            block_tokens = max(1, round(block_tokens * scale))
        input_tokens = _scaled_input(request, scale, block_tokens or 1)
        output_tokens = max(1, round(request.output_tokens * scale))
        if max_input_tokens is not None and input_tokens > max_input_tokens:
            input_tokens = max_input_tokens
            input_clamped += 1
        if max_output_tokens is not None and output_tokens > max_output_tokens:
            output_tokens = max_output_tokens
            output_clamped += 1
        hash_ids = request.hash_ids
        if block_tokens is not None:
            hash_ids = hash_ids[: math.ceil(input_tokens / block_tokens)]
        scaled.append(
            replace(
                request,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                hash_ids=hash_ids,
                block_tokens=block_tokens if hash_ids else None,
            )
        )
    return ScaledLengths(
        requests=tuple(scaled), input_clamped=input_clamped, output_clamped=output_clamped
    )
