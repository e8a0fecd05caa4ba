"""What makes a request acceptable to the engine: ids, priority class, sampling parameters,
prompt token ids inside the vocabulary, and lengths that fit the server's caps, its
max_model_len and its whole KV cache.

Owns the checks the engine runs before a request is queued, each raising RequestValidationError
naming the offending field (the API turns it into an OpenAI 400). It does not schedule, queue or
allocate anything (`reference_server.engine`, `reference_server.scheduler`).
"""

from __future__ import annotations

from collections.abc import Container

from reference_server.block_manager import BlockManager
from reference_server.config import EngineConfig
from reference_server.errors import RequestValidationError
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import PRIORITY_CLASSES

__all__ = ["validate_request"]


def validate_request(
    *,
    request_id: str,
    prompt_token_ids: list[int],
    params: SamplingParams,
    priority: str,
    in_flight: Container[str],
    vocab_size: int,
    config: EngineConfig,
    block_manager: BlockManager,
) -> None:
    """Raise RequestValidationError for anything the request itself gets wrong."""
    if not isinstance(request_id, str) or not request_id:
        raise RequestValidationError("request_id", "must be a non-empty string")
    if request_id in in_flight:
        raise RequestValidationError("request_id", f"{request_id!r} is already in flight")
    if priority not in PRIORITY_CLASSES:
        raise RequestValidationError(
            "priority", f"must be one of {', '.join(PRIORITY_CLASSES)}, got {priority!r}"
        )
    if not isinstance(params, SamplingParams):
        raise RequestValidationError("params", "must be SamplingParams")
    params.validate()
    if not isinstance(prompt_token_ids, list) or not prompt_token_ids:
        raise RequestValidationError("prompt", "must be a non-empty list of token ids")
    for token_id in prompt_token_ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise RequestValidationError("prompt", f"token ids must be integers: {token_id!r}")
        if not 0 <= token_id < vocab_size:
            raise RequestValidationError(
                "prompt", f"token id {token_id} outside the vocabulary [0, {vocab_size})"
            )
    cfg = config
    if params.max_tokens > cfg.max_tokens_cap:
        raise RequestValidationError(
            "max_tokens", f"{params.max_tokens} exceeds the server cap {cfg.max_tokens_cap}"
        )
    num_prompt = len(prompt_token_ids)
    if num_prompt >= cfg.max_model_len:
        raise RequestValidationError(
            "prompt",
            f"{num_prompt} tokens leave no room under max_model_len {cfg.max_model_len}",
        )
    if num_prompt + params.max_tokens > cfg.max_model_len:
        raise RequestValidationError(
            "max_tokens",
            f"prompt ({num_prompt}) + max_tokens ({params.max_tokens}) exceeds "
            f"max_model_len {cfg.max_model_len}",
        )
    bm = block_manager
    usable_blocks = bm.num_blocks - bm.watermark_blocks
    if bm.blocks_for_tokens(num_prompt + params.max_tokens) > usable_blocks:
        raise RequestValidationError(
            "max_tokens", "prompt + max_tokens exceeds the whole KV cache of this server"
        )
