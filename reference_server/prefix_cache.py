"""Automatic prefix caching's bookkeeping, after vLLM's v1 BlockPool: the hash of each full KV
block (chained with its parent block's hash), the hash -> block map of cached blocks, and the LRU
of free cached blocks (no request references them, their KV is kept until a fresh block is
needed).

It knows block ids and token ids only: not reference counts or block tables (the block manager
owns those and tells it when a block is registered, freed, hit or taken), not tensors, and not
who runs.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence as SequenceOf

from reference_server.sequence import Sequence

__all__ = ["PrefixCache", "hash_block_tokens"]

# The parent of a sequence's first block.
_ROOT_HASH = b""


def hash_block_tokens(parent_hash: bytes, token_ids: SequenceOf[int]) -> bytes:
    """SHA-256 of the parent block's hash and this block's token ids (little-endian int64s).
    Equal hashes mean equal tokens at equal positions after an equal prefix, hence equal KV. A
    cryptographic hash (vLLM's default too) because a collision, or one an attacker crafts,
    would hand one request another's KV; Python's hash() of a tuple is not that."""
    return hashlib.sha256(parent_hash + struct.pack(f"<{len(token_ids)}q", *token_ids)).digest()


class PrefixCache:
    """Which blocks hold which full-block prefix, and which of those are free (evictable)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        # hash_block_tokens' packing, compiled once: a block is hashed at every block boundary
        # of every decoding sequence.
        self._pack = struct.Struct(f"<{block_size}q").pack
        self._block_of: dict[bytes, int] = {}
        self._hash_of: list[bytes | None] = [None] * num_blocks
        # Free cached blocks, least recently freed first: the eviction order.
        self._free_cached: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """`seq.block_hashes`, extended to at least `num_blocks` hashes (the caller keeps
        num_blocks * block_size <= seq.num_tokens). A sequence's tokens never change, preemption
        included, so each hash is computed once per sequence (and survives a toggle of the
        cache: the same tokens hash the same)."""
        hashes = seq.block_hashes
        if len(hashes) < num_blocks:
            block_size = self.block_size
            pack = self._pack
            sha256 = hashlib.sha256
            prompt = seq.prompt_token_ids
            num_prompt = len(prompt)
            parent = hashes[-1] if hashes else _ROOT_HASH
            for index in range(len(hashes), num_blocks):
                start = index * block_size
                end = start + block_size
                if end <= num_prompt:
                    tokens = prompt[start:end]
                elif start >= num_prompt:
                    tokens = seq.output_token_ids[start - num_prompt : end - num_prompt]
                else:
                    tokens = prompt[start:] + seq.output_token_ids[: end - num_prompt]
                parent = sha256(parent + pack(*tokens)).digest()
                hashes.append(parent)
        return hashes

    @property
    def num_free_cached_blocks(self) -> int:
        return len(self._free_cached)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a registered hash, in use or free."""
        return len(self._block_of)

    def get(self, block_hash: bytes) -> int | None:
        return self._block_of.get(block_hash)

    def is_free_cached(self, block: int) -> bool:
        return block in self._free_cached

    def register(self, block: int, block_hash: bytes) -> None:
        """`block` (in use) now holds the full block `block_hash` names. A hash another block
        already holds stays with that block: `block` stays unregistered, one copy is enough."""
        if block_hash not in self._block_of and self._hash_of[block] is None:
            self._block_of[block_hash] = block
            self._hash_of[block] = block_hash

    def park(self, block: int) -> bool:
        """`block`'s last reference went: keep its KV as the most recently freed cached block.
        False when it holds no registered hash (the caller frees it plainly)."""
        if self._hash_of[block] is None:
            return False
        self._free_cached[block] = None
        return True

    def touch(self, block: int) -> None:
        """A hit on `block`: if it was free it is in use again, and no longer evictable."""
        self._free_cached.pop(block, None)

    def evict(self) -> int:
        """The least recently freed cached block, its hash dropped (it is about to be
        overwritten). The caller checks num_free_cached_blocks first."""
        block, _ = self._free_cached.popitem(last=False)
        self.forget(block)
        return block

    def forget(self, block: int) -> None:
        """Drop `block`'s hash (its KV is being replaced, or may be half written)."""
        block_hash = self._hash_of[block]
        if block_hash is not None:
            del self._block_of[block_hash]
            self._hash_of[block] = None
        self._free_cached.pop(block, None)

    def clear(self) -> list[int]:
        """Drop every hash; returns the free cached blocks, which are now plain free blocks."""
        freed = list(self._free_cached)
        self._free_cached.clear()
        self._block_of.clear()
        self._hash_of = [None] * len(self._hash_of)
        return freed
