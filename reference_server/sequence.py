"""One request's token state inside the engine (Sequence) and the unit of work the scheduler
hands the model runner (ScheduledChunk).

It does not know how blocks are chosen or when a sequence runs; the block manager fills
`block_table`, `block_hashes` and `num_registered_blocks`, the scheduler moves `status` (and, at
admission, counts a cached prefix as computed), the engine advances `num_computed_tokens` and
appends sampled tokens, and the allowed-token mask (`logits_mask.py`) keeps `utf8_state`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from reference_server.outputs import RequestOutput
from reference_server.sampling_params import SamplingParams, SamplingSignature
from reference_server.utf8_state import BOUNDARY

__all__ = ["PRIORITY_CLASSES", "ScheduledChunk", "Sequence", "SequenceStatus", "request_output"]

# Highest priority first; the index is the class rank used for ordering and victim choice.
PRIORITY_CLASSES: tuple[str, ...] = ("interactive", "batch")
_CLASS_RANK = {name: rank for rank, name in enumerate(PRIORITY_CLASSES)}


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Prompt plus generated tokens of one request, and how much of it is in the KV cache."""

    __slots__ = (
        "arrival_time",
        "batch_id",
        "block_hashes",
        "block_table",
        "class_rank",
        "deadline_time",
        "decode_chunk",
        "finish_reason",
        "first_scheduled_time",
        "first_token_time",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_lost_tokens",
        "num_preemptions",
        "num_registered_blocks",
        "num_utf8_tokens",
        "order",
        "output_token_ids",
        "prefill_end",
        "priority",
        "prompt_token_ids",
        "request_id",
        "sampling_params",
        "signature",
        "sort_key",
        "status",
        "utf8_state",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        *,
        priority: str,
        arrival_time: float,
        order: int = 0,
        signature: SamplingSignature | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids: list[int] = []
        self.sampling_params = sampling_params
        # The request's sampling signature as the client sent it (the engine passes it taken
        # before drawing a seed): what `sampling_alignment: strict` groups steps by.
        self.signature = sampling_params.signature() if signature is None else signature
        self.priority = priority
        self.class_rank = _CLASS_RANK[priority]
        self.arrival_time = arrival_time
        self.order = order
        # Running sequences are kept sorted by this: class first, then arrival; the tail is the
        # preemption victim (lowest class, latest arrival).
        self.sort_key = (self.class_rank, arrival_time, order)
        deadline = sampling_params.deadline_seconds
        self.deadline_time = None if deadline is None else arrival_time + deadline
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        # Prefix caching: the chained hash of each leading full block of the tokens (computed
        # lazily; kept across preemption, the tokens never change), and how many leading blocks
        # of block_table are registered in the cache or were shared from it.
        self.block_hashes: list[bytes] = []
        self.num_registered_blocks = 0
        # Prompt tokens found cached at the first admission (usage.prompt_tokens_details).
        self.num_cached_tokens = 0
        # Tokens computed before the last preemption: on re-admission, those not found cached
        # are counted as recomputed.
        self.num_lost_tokens = 0
        self.status = SequenceStatus.WAITING
        self.batch_id: int | None = None
        # Tokens below this index were part of the (re)admitted prompt: computing them counts as
        # prefill, everything after as decode.
        self.prefill_end = 0
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_reason: str | None = None
        self.num_preemptions = 0
        # The UTF-8 decoder state after output_token_ids[:num_utf8_tokens], advanced by the
        # allowed-token mask as tokens arrive. Preemption by recompute keeps the output tokens,
        # so it stays right across a recompute.
        self.utf8_state = BOUNDARY
        self.num_utf8_tokens = 0
        # The scheduler's reusable ScheduledChunk(self, 1, True) for decode steps (chunks are
        # immutable, so one object serves every step); dropped when the sequence finishes.
        self.decode_chunk: ScheduledChunk | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids) - self.num_computed_tokens

    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, {self.priority}, {self.status.value}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens})"
        )


@dataclass(frozen=True, slots=True)
class ScheduledChunk:
    """Compute positions [seq.num_computed_tokens, + num_new_tokens) of `seq` in this step.

    `sample` is True when the chunk ends at seq.num_tokens: exactly one next token is sampled.
    The scheduler guarantees len(seq.block_table) * block_size >= the chunk's end.
    """

    seq: Sequence
    num_new_tokens: int
    sample: bool


def request_output(
    seq: Sequence, new_token_ids: list[int], text: str, reason: str | None
) -> RequestOutput:
    """`seq`'s delta for this step: its new tokens and text, finished when `reason` is set."""
    return RequestOutput(
        request_id=seq.request_id,
        new_token_ids=new_token_ids,
        new_text=text,
        finished=reason is not None,
        finish_reason=reason,
        num_prompt_tokens=len(seq.prompt_token_ids),
        num_output_tokens=len(seq.output_token_ids),
        arrival_time=seq.arrival_time,
        first_scheduled_time=seq.first_scheduled_time,
        first_token_time=seq.first_token_time,
        num_preemptions=seq.num_preemptions,
        num_cached_tokens=seq.num_cached_tokens,
        num_reasoning_tokens=min(
            len(seq.output_token_ids), seq.sampling_params.num_thinking_tokens
        ),
    )
