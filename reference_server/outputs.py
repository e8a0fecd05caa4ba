"""What the engine hands back: RequestOutput (one request's delta), StepResult (one step) and
EngineStats (counters and gauges for /metrics).

Plain value objects; they know nothing of how they were produced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reference_server.errors import EngineError
from reference_server.step_record import StepRecord

__all__ = [
    "FINISH_REASONS",
    "SNAPSHOT_INTERVAL_SECONDS",
    "EngineStats",
    "RequestOutput",
    "StepResult",
]

FINISH_REASONS: tuple[str, ...] = ("length", "stop", "deadline", "abort", "max_model_len")
# How old the EngineStats snapshot /metrics reads may be while the engine steps (both front ends
# refresh it at this interval, and always when the engine comes to rest).
SNAPSHOT_INTERVAL_SECONDS = 0.05


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    new_token_ids: list[int]
    new_text: str  # complete UTF-8 characters only
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_time: float  # time.monotonic()
    first_scheduled_time: float | None
    first_token_time: float | None
    num_preemptions: int = 0
    # Prompt tokens whose KV was found in the prefix cache at the first admission (OpenAI's
    # usage.prompt_tokens_details.cached_tokens); 0 with caching off.
    num_cached_tokens: int = 0
    # Thinking mode: the reasoning text of this delta (complete characters; the answer's text is
    # `new_text`), and the output tokens that were reasoning so far (counted in
    # num_output_tokens too, as usage.completion_tokens_details.reasoning_tokens is).
    new_reasoning_text: str = ""
    num_reasoning_tokens: int = 0


@dataclass(slots=True)
class StepResult:
    outputs: list[RequestOutput]
    record: StepRecord | None  # None when nothing ran in this step
    # Requests this step failed (an exception in their forward pass): each gets its error
    # instead of further outputs; the engine keeps serving the others.
    failures: list[tuple[str, EngineError]] = field(default_factory=list)
    # Embedding jobs this step finished: (job id, vectors or None, error or None).
    embeddings: list[tuple[int, list[list[float]] | None, EngineError | None]] = field(
        default_factory=list
    )


@dataclass(slots=True, kw_only=True)
class EngineStats:
    num_preemptions_total: int = 0
    num_recomputed_tokens_total: int = 0
    num_prompt_tokens_total: int = 0
    num_prefill_tokens_total: int = 0  # includes recomputed tokens; excludes cached ones
    # Prefix caching, in tokens (vLLM's meaning): prompt tokens looked up at a request's first
    # admission while caching is on, and those found cached.
    num_prefix_cache_queries_total: int = 0
    num_prefix_cache_hits_total: int = 0
    num_generation_tokens_total: int = 0
    num_finished_total_by_reason: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0)
    )
    num_aborted_total: int = 0
    num_rejected_total_by_reason: dict[str, int] = field(default_factory=dict)
    num_steps_total: int = 0
    num_running_by_class: dict[str, int] = field(default_factory=dict)
    num_waiting_by_class: dict[str, int] = field(default_factory=dict)
    num_kv_blocks_used: int = 0  # referenced by live sequences
    num_kv_blocks_cached: int = 0  # free, holding a cached prefix (evictable)
    num_kv_blocks_total: int = 0
    num_kv_tokens_total: int = 0  # blocks * block_size: the pool's capacity in tokens
    num_kv_blocks_peak: int = 0
    kv_usage_ratio: float = 0.0
    kv_usage_peak_ratio: float = 0.0
    num_kv_slots_unused: int = 0
    num_kv_slots_unused_at_peak: int = 0
    # The slo policy (None until its cost model is ready, and under the other policies): the
    # last step's token budget, its predicted duration, and the model's recent mean |error|.
    slo_token_budget: int | None = None
    slo_predicted_step_seconds: float | None = None
    slo_prediction_error_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
