"""The value types of a request trace: one `TraceRequest` per replayable line, one `Trace` per file.

Owns the fields every reader fills in, whatever the file format was, so that windows, scaling,
sessions and prompt building work on one shape. It does not know how a file is parsed
(`loadgen.traces.formats`), how a window is cut (`loadgen.traces.window`) nor how a request is
sent.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Trace", "TraceRequest"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceRequest:
    """One request of a trace, in the trace's own token counts.

    `index` is the 0-based position of the line (JSONL) or data row (CSV) in the file: what a
    request record stores as `trace_index`, so a replayed request can be traced back to its line.
    `turn` is 0-based (the request records' convention); Bailian's 1-based `turn` is shifted.
    """

    index: int
    timestamp_seconds: float  # from the trace's first request (or the window start, once cut)
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # one id per prefix block; equal leading ids = shared prefix
    block_tokens: int | None = None  # tokens per hash block; None when hash_ids is empty
    session: str | None = None  # conversation id (Bailian: the root chat's id)
    chat_id: str | None = None  # Bailian: this request's own chat id
    parent: str | None = None  # Bailian: the chat id of the previous turn; None for a first turn
    turn: int | None = None  # 0-based turn within `session`


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    """A whole trace file, validated and normalised (timestamps in seconds from the first request).

    `skipped_empty` counts rows of a third-party format with 0 input or 0 output tokens, which the
    reader leaves out: there is no prompt or no answer to replay (BurstGPT documents its rows with
    `Response tokens` 0 as failed requests). Our own `jsonl` format refuses such lines instead.
    """

    path: str
    format: str
    requests: tuple[TraceRequest, ...]
    skipped_empty: int = 0

    @property
    def span_seconds(self) -> float:
        """Seconds from the first request to the last one."""
        return self.requests[-1].timestamp_seconds if self.requests else 0.0
