"""The KV-cache block accounting (BlockManager): a free list of fixed-size blocks, each block's
reference count, and each sequence's block table; with automatic prefix caching on, full blocks
are shared between sequences through the PrefixCache (prefix_cache.py: hashes and the LRU of free
cached blocks).

It counts blocks only: it never touches tensors (the model runner owns the KV pool) and does not
decide who runs (the scheduler asks `find_cached_prefix` / `can_*` and then commits with
`allocate` / `append_slot`).

A block is used while a sequence's table references it, free otherwise. A free block either is
plain or still holds a cached prefix (evictable: it is handed out only once no plain free block
is left, least recently freed first). Every capacity check counts both kinds as free, as vLLM does.
A prefill chunk registers the blocks it fills when it is scheduled (vLLM's `cache_blocks`): the
model runner writes a step's K/V into the pool before any attention reads it, so a sequence
admitted in the same step may already share them. A block that decodes fill is registered when
its sequence next takes a block, or frees its blocks (see try_append_decode_slot).
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass

from reference_server.prefix_cache import PrefixCache
from reference_server.sequence import Sequence

__all__ = ["BlockManager", "BlockManagerStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockManagerStats:
    block_size: int
    num_blocks_total: int
    num_blocks_used: int  # referenced by at least one sequence
    num_blocks_free: int  # plain free + cached free (evictable)
    num_blocks_peak: int
    num_slots_allocated: int  # used blocks * block_size
    num_slots_unused: int  # allocated to a sequence but holding no token (yet)
    num_slots_unused_at_peak: int  # the same, at the moment the block peak was reached
    num_blocks_cached: int = 0  # free blocks holding a cached prefix (part of num_blocks_free)

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
    """Blocks of `block_size` token slots; `watermark_ratio` of them stay free for decodes.

    `enable_prefix_caching` is off unless asked for; the scheduler applies the live setting
    (`set_prefix_caching`)."""

    def __init__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        watermark_ratio: float = 0.0,
        enable_prefix_caching: bool = False,
    ) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        if not 0 <= watermark_ratio < 1:
            raise ValueError(f"watermark_ratio must be in [0, 1), got {watermark_ratio!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_blocks = int(num_blocks * watermark_ratio)
        # Plain free blocks, a stack: pop() hands out low ids first, which keeps tests readable.
        self._free_blocks: list[int] = list(range(num_blocks - 1, -1, -1))
        self._ref_counts = [0] * num_blocks
        self._prefix_cache: PrefixCache | None = None
        self.set_prefix_caching(enable_prefix_caching)
        # request_id -> token slots the sequence has been promised (computed + being computed).
        self._reserved_tokens: dict[str, int] = {}
        self._num_reserved_tokens = 0
        # Entries of all block tables: a shared block counts once per table that holds it, so
        # (this * block_size - reserved tokens) is the slots promised to no token.
        self._num_table_blocks = 0
        self._num_blocks_peak = 0
        self._num_slots_unused_at_peak = 0

    # -- prefix caching --------------------------------------------------------------------

    @property
    def enable_prefix_caching(self) -> bool:
        return self._prefix_cache is not None

    def set_prefix_caching(self, enabled: bool) -> None:
        """Turn caching on (with an empty cache) or off. Off drops every hash at once: free
        cached blocks become plain free blocks, blocks in use are freed plainly later, and no
        lookup hits or block is registered until it is turned on again."""
        if enabled == (self._prefix_cache is not None):
            return
        if enabled:
            self._prefix_cache = PrefixCache(self.num_blocks, self.block_size)
            return
        assert self._prefix_cache is not None
        self._free_blocks.extend(self._prefix_cache.clear())
        self._prefix_cache = None

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """The cached blocks holding `seq`'s longest run of leading full blocks, at most up to
        its next-to-last token (the last one is always computed, so a token can be sampled).
        Empty when caching is off. Changes nothing: pass the result to can_allocate/allocate."""
        cache = self._prefix_cache
        max_blocks = (seq.num_tokens - 1) // self.block_size
        if cache is None or max_blocks <= 0:
            return []
        hashes = seq.block_hashes
        blocks: list[int] = []
        for index in range(max_blocks):
            if index >= len(hashes):
                # Hash one block past the known ones at a time: a miss ends the walk.
                hashes = cache.block_hashes(seq, index + 1)
            block = cache.get(hashes[index])
            if block is None:
                break
            blocks.append(block)
        return blocks

    # -- counting --------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks a sequence could take now: plain free and cached free (evictable)."""
        cache = self._prefix_cache
        return len(self._free_blocks) + (cache.num_free_cached_blocks if cache is not None else 0)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by live sequences (0 after a drain, whatever stays cached)."""
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_free_blocks(self) -> int:
        cache = self._prefix_cache
        return cache.num_free_cached_blocks if cache is not None else 0

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks `seq` still lacks to hold its computed tokens plus `num_new_tokens`."""
        target = seq.num_computed_tokens + num_new_tokens
        return max(0, self.blocks_for_tokens(target) - len(seq.block_table))

    def max_new_tokens(self, seq: Sequence, *, use_watermark: bool = False) -> int:
        """How many new tokens of `seq` fit in its blocks plus the free ones."""
        free = self.num_free_blocks - (self.watermark_blocks if use_watermark else 0)
        capacity = (len(seq.block_table) + max(0, free)) * self.block_size
        return max(0, capacity - seq.num_computed_tokens)

    def can_allocate(
        self, seq: Sequence, num_new_tokens: int, cached_blocks: SequenceOf[int] = ()
    ) -> bool:
        """Admission check: `seq` takes `cached_blocks` (from find_cached_prefix) as its first
        blocks and room for `num_new_tokens` after them, leaving the watermark free. A cached
        block that is free now stops being available once shared, as in vLLM."""
        needed = self._num_blocks_to_allocate(seq, num_new_tokens, cached_blocks)
        available = self.num_free_blocks - self.watermark_blocks
        if cached_blocks:
            cache = self._prefix_cache
            assert cache is not None
            available -= sum(1 for block in cached_blocks if cache.is_free_cached(block))
        return needed <= available

    def allocate(
        self, seq: Sequence, num_new_tokens: int, cached_blocks: SequenceOf[int] = ()
    ) -> None:
        """Commit what can_allocate checked. The scheduler then counts the cached blocks'
        tokens as computed (seq.num_computed_tokens)."""
        if not self.can_allocate(seq, num_new_tokens, cached_blocks):
            raise RuntimeError(f"cannot allocate {num_new_tokens} tokens for {seq.request_id}")
        if cached_blocks:
            # Shared first, so taking fresh blocks below can never evict one of them.
            cache = self._prefix_cache
            assert cache is not None
            refs = self._ref_counts
            for block in cached_blocks:
                cache.touch(block)
                refs[block] += 1
            seq.block_table.extend(cached_blocks)
            self._num_table_blocks += len(cached_blocks)
            seq.num_registered_blocks = len(cached_blocks)
        target = seq.num_computed_tokens + len(cached_blocks) * self.block_size + num_new_tokens
        self._grow(seq, target)

    def can_append(self, seq: Sequence, num_new_tokens: int = 1) -> bool:
        """Check for a sequence already running: the watermark may be used."""
        return self.num_blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def append_slot(self, seq: Sequence, num_new_tokens: int = 1) -> None:
        if not self.can_append(seq, num_new_tokens):
            raise RuntimeError(f"no free block for {num_new_tokens} tokens of {seq.request_id}")
        self._grow(seq, seq.num_computed_tokens + num_new_tokens)

    def try_append_decode_slot(self, seq: Sequence) -> bool:
        """The per-step hot path: room for one more token of a decoding sequence, or False.

        A block that decodes fill is registered when the sequence next grows (the first token
        past it: its KV has been computed by then) or frees its blocks, so a step that takes no
        block does no more work than without prefix caching."""
        table = seq.block_table
        position = seq.num_computed_tokens
        grew = position >= len(table) * self.block_size
        if grew:
            free_blocks = self._free_blocks
            cache = self._prefix_cache
            if free_blocks:
                block = free_blocks.pop()
                self._ref_counts[block] = 1
            elif cache is not None and cache.num_free_cached_blocks:
                block = self._take_block()
            else:
                return False
            table.append(block)
            self._num_table_blocks += 1
            if cache is not None:
                self._register_full_blocks(seq, position)
        reserved = self._reserved_tokens
        request_id = seq.request_id
        target = position + 1
        previous = reserved.get(request_id, 0)
        if target > previous:
            reserved[request_id] = target
            self._num_reserved_tokens += target - previous
        if grew:
            used = self.num_blocks - len(self._free_blocks)
            if cache is not None:
                used -= cache.num_free_cached_blocks
            if used > self._num_blocks_peak:
                self._grow_peak(used)
        return True

    def free(self, seq: Sequence, *, discard_cached: bool = False) -> None:
        """Drop all of `seq`'s block references; a sequence holding none is a no-op. A block no
        one references any more stays cached (evictable) if it holds a registered prefix.
        `discard_cached`: its KV may be half written (a failed forward), so the blocks it frees
        lose their hashes."""
        table = seq.block_table
        if table:
            refs = self._ref_counts
            cache = self._prefix_cache
            if cache is not None and not discard_cached:
                # The blocks its last decodes filled (computed, not registered yet).
                self._register_full_blocks(seq, seq.num_computed_tokens)
            free_blocks = self._free_blocks
            self._num_table_blocks -= len(table)
            # Tail first: the end of a prompt is evicted before the head others share (vLLM).
            for block in reversed(table):
                refs[block] -= 1
                if refs[block]:
                    continue
                if cache is not None:
                    if discard_cached:
                        cache.forget(block)
                    elif cache.park(block):
                        continue
                free_blocks.append(block)
            seq.block_table = []
        seq.num_registered_blocks = 0
        self._num_reserved_tokens -= self._reserved_tokens.pop(seq.request_id, 0)

    def owns_blocks(self, request_id: str) -> bool:
        return request_id in self._reserved_tokens

    def stats(self) -> BlockManagerStats:
        used = self.num_used_blocks
        return BlockManagerStats(
            block_size=self.block_size,
            num_blocks_total=self.num_blocks,
            num_blocks_used=used,
            num_blocks_free=self.num_blocks - used,
            num_blocks_peak=self._num_blocks_peak,
            num_slots_allocated=used * self.block_size,
            num_slots_unused=self._num_table_blocks * self.block_size - self._num_reserved_tokens,
            num_slots_unused_at_peak=self._num_slots_unused_at_peak,
            num_blocks_cached=self.num_cached_free_blocks,
        )

    def reset_peak(self) -> None:
        self._num_blocks_peak = self.num_used_blocks
        self._num_slots_unused_at_peak = self._num_table_blocks * self.block_size - (
            self._num_reserved_tokens
        )

    # -- internals -------------------------------------------------------------------------

    def _num_blocks_to_allocate(
        self, seq: Sequence, num_new_tokens: int, cached_blocks: SequenceOf[int]
    ) -> int:
        if cached_blocks and (seq.block_table or seq.num_computed_tokens):
            raise ValueError(f"{seq.request_id}: a cached prefix is shared only at admission")
        target = seq.num_computed_tokens + len(cached_blocks) * self.block_size + num_new_tokens
        return max(0, self.blocks_for_tokens(target) - len(seq.block_table) - len(cached_blocks))

    def _take_block(self) -> int:
        """A fresh block: a plain free one, else the least recently freed cached one (evicted).
        The caller has checked that one is free."""
        if self._free_blocks:
            block = self._free_blocks.pop()
        else:
            assert self._prefix_cache is not None
            block = self._prefix_cache.evict()
        self._ref_counts[block] = 1
        return block

    def _grow(self, seq: Sequence, target: int) -> None:
        """Blocks and reserved slots for `seq`'s first `target` tokens."""
        table = seq.block_table
        missing = self.blocks_for_tokens(target) - len(table)
        for _ in range(missing):
            table.append(self._take_block())
        if missing > 0:
            self._num_table_blocks += missing
        previous = self._reserved_tokens.get(seq.request_id, 0)
        if target > previous:
            self._reserved_tokens[seq.request_id] = target
            self._num_reserved_tokens += target - previous
        elif seq.request_id not in self._reserved_tokens:
            self._reserved_tokens[seq.request_id] = previous
        if self._prefix_cache is not None:
            self._register_full_blocks(seq, target)
        used = self.num_used_blocks
        if used > self._num_blocks_peak:
            self._grow_peak(used)

    def _register_full_blocks(self, seq: Sequence, target: int) -> None:
        """Register the blocks of `seq` that its first `target` tokens fill (vLLM registers
        prompt and output blocks alike: a later turn of a chat shares the earlier answer)."""
        num_tokens = len(seq.prompt_token_ids) + len(seq.output_token_ids)
        num_full = min(target, num_tokens) // self.block_size
        start = seq.num_registered_blocks
        if num_full <= start:
            return
        cache = self._prefix_cache
        assert cache is not None
        hashes = seq.block_hashes
        if len(hashes) < num_full:
            hashes = cache.block_hashes(seq, num_full)
        register = cache.register
        table = seq.block_table
        for index in range(start, num_full):
            register(table[index], hashes[index])
        seq.num_registered_blocks = num_full

    def _grow_peak(self, used: int) -> None:
        self._num_blocks_peak = used
        self._num_slots_unused_at_peak = (
            self._num_table_blocks * self.block_size - self._num_reserved_tokens
        )
