"""The slo policy's per-step token budget: how many tokens the next step may compute so that
its predicted duration stays under `slo_target_ms`.

A pure planning function over the running sequences, the queue heads and the step cost model
(reference_server/step_cost.py); it does not schedule, allocate or change any sequence.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

from reference_server.block_manager import BlockManager
from reference_server.config import BatchingConfig
from reference_server.sequence import Sequence
from reference_server.step_cost import StepCostModel

__all__ = ["plan_slo_budget"]


def plan_slo_budget(
    config: BatchingConfig,
    model: StepCostModel,
    running: SequenceOf[Sequence],
    queue_heads: SequenceOf[Sequence],
    block_manager: BlockManager,
) -> tuple[int, float | None]:
    """(token budget, predicted step milliseconds or None before the model is ready).

    The budget is every running decode, plus the most prefill tokens the cost model predicts
    fit under slo_target_ms, and never fewer than slo_min_prefill_tokens, so prompts keep moving
    whatever the target. Until the model is ready the prefill gets just that floor: the first
    prompts teach the model their cost in small steps instead of one long one.
    max_num_batched_tokens stays the ceiling."""
    ceiling = config.max_num_batched_tokens
    decode_rows = decode_context = 0
    prefill_start: int | None = None
    for seq in running:
        num_tokens = seq.num_tokens
        if num_tokens - seq.num_computed_tokens == 1:
            decode_rows += 1
            decode_context += num_tokens
        elif prefill_start is None:
            prefill_start = seq.num_computed_tokens
    if prefill_start is None:
        if not queue_heads:
            # Decodes only: each gets its token; nothing else could use more budget.
            predicted = None
            if model.ready:
                predicted = model.predict_ms(
                    model.planned_features(decode_rows, decode_context, 0, 0)
                )
            return max(1, decode_rows), predicted
        # Its prefill starts after what it will find cached (more context per token).
        cached = block_manager.find_cached_prefix(queue_heads[0])
        prefill_start = len(cached) * block_manager.block_size
    room = ceiling - decode_rows
    floor = min(config.slo_min_prefill_tokens, room)
    if not model.ready:
        return decode_rows + floor, None
    prefill = model.max_prefill_tokens(
        target_ms=model.step_target_ms(config.slo_target_ms),
        decode_rows=decode_rows,
        decode_context=decode_context,
        prefill_start=prefill_start,
        limit=room,
    )
    prefill = max(prefill, floor)
    predicted = model.predict_ms(
        model.planned_features(decode_rows, decode_context, prefill_start, prefill)
    )
    return decode_rows + prefill, predicted
