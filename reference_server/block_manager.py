"""The KV-cache block accounting (BlockManager): a free list of fixed-size blocks and each
sequence's block table.

It counts blocks only: it never touches tensors (the model runner owns the KV pool) and does not
decide who runs (the scheduler asks `can_*` and then commits with `allocate` / `append_slot`).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_server.sequence import Sequence

__all__ = ["BlockManager", "BlockManagerStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockManagerStats:
    block_size: int
    num_blocks_total: int
    num_blocks_used: int
    num_blocks_free: int
    num_blocks_peak: int
    num_slots_allocated: int  # used blocks * block_size
    num_slots_unused: int  # allocated to a sequence but holding no token (yet)
    num_slots_unused_at_peak: int  # the same, at the moment the block peak was reached

    @property
    def usage_ratio(self) -> float:
        return self.num_blocks_used / self.num_blocks_total

    @property
    def peak_usage_ratio(self) -> float:
        return self.num_blocks_peak / self.num_blocks_total

    @property
    def unused_slots_ratio_at_peak(self) -> float:
        allocated = self.num_blocks_peak * self.block_size
        return self.num_slots_unused_at_peak / allocated if allocated else 0.0


class BlockManager:
    """Blocks of `block_size` token slots; `watermark_ratio` of them stay free for decodes."""

    def __init__(self, *, num_blocks: int, block_size: int, watermark_ratio: float = 0.0) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        if not 0 <= watermark_ratio < 1:
            raise ValueError(f"watermark_ratio must be in [0, 1), got {watermark_ratio!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_blocks = int(num_blocks * watermark_ratio)
        # A stack: pop() hands out low ids first, which keeps tests readable.
        self._free_blocks: list[int] = list(range(num_blocks - 1, -1, -1))
        # request_id -> token slots the sequence has been promised (computed + being computed).
        self._reserved_tokens: dict[str, int] = {}
        self._num_reserved_tokens = 0
        self._num_blocks_peak = 0
        self._num_slots_unused_at_peak = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free_blocks)

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks `seq` still lacks to hold its computed tokens plus `num_new_tokens`."""
        target = seq.num_computed_tokens + num_new_tokens
        return max(0, self.blocks_for_tokens(target) - len(seq.block_table))

    def max_new_tokens(self, seq: Sequence, *, use_watermark: bool = False) -> int:
        """How many new tokens of `seq` fit in its blocks plus the free ones."""
        free = len(self._free_blocks) - (self.watermark_blocks if use_watermark else 0)
        capacity = (len(seq.block_table) + max(0, free)) * self.block_size
        return max(0, capacity - seq.num_computed_tokens)

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Admission check: the blocks fit and leave the watermark free."""
        needed = self.num_blocks_needed(seq, num_new_tokens)
        return needed <= len(self._free_blocks) - self.watermark_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        if not self.can_allocate(seq, num_new_tokens):
            raise RuntimeError(f"cannot allocate {num_new_tokens} tokens for {seq.request_id}")
        self._grow(seq, num_new_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int = 1) -> bool:
        """Check for a sequence already running: the watermark may be used."""
        return self.num_blocks_needed(seq, num_new_tokens) <= len(self._free_blocks)

    def append_slot(self, seq: Sequence, num_new_tokens: int = 1) -> None:
        if not self.can_append(seq, num_new_tokens):
            raise RuntimeError(f"no free block for {num_new_tokens} tokens of {seq.request_id}")
        self._grow(seq, num_new_tokens)

    def try_append_decode_slot(self, seq: Sequence) -> bool:
        """The per-step hot path: room for one more token of a decoding sequence, or False."""
        table = seq.block_table
        position = seq.num_computed_tokens
        grew = position >= len(table) * self.block_size
        if grew:
            free_blocks = self._free_blocks
            if not free_blocks:
                return False
            table.append(free_blocks.pop())
        reserved = self._reserved_tokens
        request_id = seq.request_id
        target = position + 1
        previous = reserved.get(request_id, 0)
        if target > previous:
            reserved[request_id] = target
            self._num_reserved_tokens += target - previous
        if grew and self.num_blocks - len(self._free_blocks) > self._num_blocks_peak:
            self._grow_peak(self.num_blocks - len(self._free_blocks))
        return True

    def free(self, seq: Sequence) -> None:
        """Return all of `seq`'s blocks; a sequence holding none is a no-op."""
        self._free_blocks.extend(reversed(seq.block_table))
        seq.block_table = []
        self._num_reserved_tokens -= self._reserved_tokens.pop(seq.request_id, 0)

    def owns_blocks(self, request_id: str) -> bool:
        return request_id in self._reserved_tokens

    def stats(self) -> BlockManagerStats:
        used = self.num_used_blocks
        return BlockManagerStats(
            block_size=self.block_size,
            num_blocks_total=self.num_blocks,
            num_blocks_used=used,
            num_blocks_free=len(self._free_blocks),
            num_blocks_peak=self._num_blocks_peak,
            num_slots_allocated=used * self.block_size,
            num_slots_unused=used * self.block_size - self._num_reserved_tokens,
            num_slots_unused_at_peak=self._num_slots_unused_at_peak,
        )

    def reset_peak(self) -> None:
        self._num_blocks_peak = self.num_used_blocks
        self._num_slots_unused_at_peak = self._num_blocks_peak * self.block_size - (
            self._num_reserved_tokens
        )

    def _grow(self, seq: Sequence, num_new_tokens: int) -> None:
        table = seq.block_table
        for _ in range(self.num_blocks_needed(seq, num_new_tokens)):
            table.append(self._free_blocks.pop())
        target = seq.num_computed_tokens + num_new_tokens
        previous = self._reserved_tokens.get(seq.request_id, 0)
        if target > previous:
            self._reserved_tokens[seq.request_id] = target
            self._num_reserved_tokens += target - previous
        elif seq.request_id not in self._reserved_tokens:
            self._reserved_tokens[seq.request_id] = previous
        used = self.num_blocks - len(self._free_blocks)
        if used > self._num_blocks_peak:
            self._grow_peak(used)

    def _grow_peak(self, used: int) -> None:
        self._num_blocks_peak = used
        self._num_slots_unused_at_peak = used * self.block_size - self._num_reserved_tokens
