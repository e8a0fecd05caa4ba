"""The ideal prefix-cache hit ratio of a replayed trace window (docs/traces.md).

Owns the replay of a window's hash-id prefixes, in send order, through an LRU of the target's KV
capacity (or an unbounded one): what a perfect prefix cache of that size would have served,
the yardstick for the measured `prefix_cache_hit_ratio`. The rules follow a paged prefix cache
(vLLM's automatic prefix caching):

- a block is identified by its whole prefix (the hash of block i covers blocks 0..i), so the
  LRU is keyed by the chain of ids, not the bare id;
- a lookup hits the request's leading blocks up to the first miss: a prefix cache can only
  reuse a prefix;
- after the lookup, every full block of the prompt is inserted or touched as most recent, the
  last block first, so the prefix's first blocks are evicted last (vLLM frees a request's blocks
  in reverse order for the same reason); a partial last block is never cached;
- at most input_tokens - 1 tokens hit: the engine computes the last prompt token to sample;
- hits and queries are in prompt tokens (queries: every prompt token sent), as vLLM counts.

The capacity is given in tokens (the target's KV capacity) and each cached block weighs its
block_tokens, so a uniform trace holds floor(capacity / block_tokens) blocks. It does not read
traces or records (the caller passes `(hash_ids, block_tokens, input_tokens)` per request) and
knows no thresholds or verdicts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["PrefixIdeal", "ideal_hit_ratio"]


@dataclass(frozen=True, kw_only=True)
class PrefixIdeal:
    hits_tokens: int  # prompt tokens an ideal cache would have served
    queries_tokens: int  # prompt tokens looked up: every prompt token sent
    num_requests: int
    capacity_tokens: int | None  # None: an unbounded cache

    @property
    def ratio(self) -> float | None:
        """hits_tokens / queries_tokens; None for a window without prompt tokens."""
        return self.hits_tokens / self.queries_tokens if self.queries_tokens else None


def ideal_hit_ratio(
    requests: Iterable[tuple[Sequence[int], int | None, int]],
    capacity_tokens: int | None = None,
) -> PrefixIdeal:
    """Replay `(hash_ids, block_tokens, input_tokens)` per request, in send order."""
    if capacity_tokens is not None and (
        isinstance(capacity_tokens, bool)
        or not isinstance(capacity_tokens, int)
        or capacity_tokens < 0
    ):
        raise ValueError(
            f"capacity_tokens must be an integer >= 0 or None, got {capacity_tokens!r}"
        )
    chain_ids: dict[tuple[int, int], int] = {}  # (parent block, hash id) -> block
    lru: OrderedDict[int, int] = OrderedDict()  # block -> its tokens, least recent first
    unbounded: set[int] = set()
    used_tokens = hit_tokens = query_tokens = num_requests = 0
    for hash_ids, block_tokens, input_tokens in requests:
        num_requests += 1
        if input_tokens < 1:
            raise ValueError(f"input_tokens must be >= 1, got {input_tokens}")
        query_tokens += input_tokens
        if not hash_ids or not block_tokens:
            continue
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        chain = []
        parent = -1
        for hash_id in hash_ids[: min(len(hash_ids), input_tokens // block_tokens)]:
            key = (parent, hash_id)
            block = chain_ids.get(key)
            if block is None:
                block = chain_ids[key] = len(chain_ids)
            chain.append(block)
            parent = block
        cached = unbounded if capacity_tokens is None else lru
        hits = 0
        for block in chain:
            if block not in cached:
                break
            hits += 1
        hit_tokens += min(hits * block_tokens, input_tokens - 1)
        if capacity_tokens is None:
            unbounded.update(chain)
            continue
        for block in reversed(chain):
            if block in lru:
                lru.move_to_end(block)
            else:
                lru[block] = block_tokens
                used_tokens += block_tokens
        while used_tokens > capacity_tokens:
            used_tokens -= lru.popitem(last=False)[1]
    return PrefixIdeal(
        hits_tokens=hit_tokens,
        queries_tokens=query_tokens,
        num_requests=num_requests,
        capacity_tokens=capacity_tokens,
    )
