"""Automatic prefix caching in the block manager (prefix_cache.py, block_manager.py): chained
block hashes, hits and misses, the last-token rule, reference counts of shared blocks, the LRU of
free cached blocks, capacity counting, the live toggle, and invariants under random operations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.block_manager import BlockManager
from reference_server.prefix_cache import PrefixCache, hash_block_tokens
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence

BLOCK = 4


def _seq(request_id: str, tokens: list[int]) -> Sequence:
    return Sequence(
        request_id, list(tokens), SamplingParams(), priority="interactive", arrival_time=0.0
    )


def _bm(num_blocks: int = 8, *, watermark_ratio: float = 0.0) -> BlockManager:
    return BlockManager(
        num_blocks=num_blocks,
        block_size=BLOCK,
        watermark_ratio=watermark_ratio,
        enable_prefix_caching=True,
    )


def _admit(bm: BlockManager, seq: Sequence, num_new: int | None = None) -> list[int]:
    """What the scheduler does at admission: look up, allocate, count the prefix computed;
    then the engine computes the chunk. Returns the shared blocks."""
    cached = bm.find_cached_prefix(seq)
    num_cached = len(cached) * BLOCK
    num_new = seq.num_tokens - num_cached if num_new is None else num_new
    bm.allocate(seq, num_new, cached)
    seq.num_computed_tokens = num_cached + num_new
    return cached


def block_hashes(seq: Sequence, num_blocks: int, block_size: int) -> list[bytes]:
    return PrefixCache(1, block_size).block_hashes(seq, num_blocks)


def _decode(bm: BlockManager, seq: Sequence, token: int) -> None:
    """The engine's sampled token, then its decode step."""
    seq.output_token_ids.append(token)
    assert bm.try_append_decode_slot(seq)
    seq.num_computed_tokens += 1


# -- hashing -------------------------------------------------------------------------------


def test_block_hashes_chain_so_equal_blocks_after_different_prefixes_differ():
    a = block_hashes(_seq("a", [1, 2, 3, 4, 5, 6, 7, 8]), 2, BLOCK)
    b = block_hashes(_seq("b", [1, 2, 3, 4, 5, 6, 7, 8, 9]), 2, BLOCK)
    c = block_hashes(_seq("c", [9, 2, 3, 4, 5, 6, 7, 8]), 2, BLOCK)
    assert a == b  # the same prefix, the same hashes
    assert c[0] != a[0] and c[1] != a[1]  # the second blocks are equal, their parents are not
    assert a[1] == hash_block_tokens(a[0], [5, 6, 7, 8])
    assert a[0] != a[1]


def test_block_hashes_span_prompt_and_output_and_are_computed_once():
    seq = _seq("a", [1, 2, 3, 4, 5, 6])
    seq.output_token_ids = [7, 8]
    hashes = block_hashes(seq, 2, BLOCK)
    assert hashes == block_hashes(_seq("b", [1, 2, 3, 4, 5, 6, 7, 8]), 2, BLOCK)
    assert block_hashes(seq, 1, BLOCK) is seq.block_hashes and len(seq.block_hashes) == 2


# -- hits and misses -----------------------------------------------------------------------


def test_a_second_prompt_shares_the_first_ones_full_blocks_and_skips_their_prefill():
    bm = _bm()
    first = _seq("a", list(range(1, 11)))  # 10 tokens: 2 full blocks + 2
    assert _admit(bm, first) == []
    assert first.block_table == [0, 1, 2]
    second = _seq("b", [*range(1, 9), 50, 51, 52])  # the same 2 blocks, then its own
    assert _admit(bm, second) == [0, 1]
    assert second.block_table == [0, 1, 3]
    assert bm.num_used_blocks == 4  # one shared copy of the two common blocks


def test_a_partial_hit_stops_at_the_first_differing_block():
    bm = _bm()
    _admit(bm, _seq("a", list(range(1, 13))))  # 3 full blocks
    other = _seq("b", [1, 2, 3, 4, 5, 6, 0, 8, 9, 10, 11, 12, 13])
    assert bm.find_cached_prefix(other) == [0]
    assert bm.find_cached_prefix(_seq("c", [0, *range(2, 14)])) == []


def test_the_last_token_is_always_computed_even_when_the_whole_prompt_is_cached():
    bm = _bm()
    _admit(bm, _seq("a", list(range(1, 13))))  # 12 tokens: 3 full blocks, all registered
    same = _seq("b", list(range(1, 13)))
    assert bm.find_cached_prefix(same) == [0, 1]  # not the third block: it holds the last token
    longer = _seq("c", list(range(1, 14)))
    assert bm.find_cached_prefix(longer) == [0, 1, 2]
    assert bm.find_cached_prefix(_seq("d", [1, 2, 3, 4])) == []


def test_only_full_blocks_are_registered_and_decodes_register_theirs_at_the_next_block():
    bm = _bm()
    seq = _seq("a", [1, 2, 3, 4, 5, 6])
    _admit(bm, seq)
    probe = _seq("p", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert bm.find_cached_prefix(probe) == [0]  # [5, 6, _, _] is not full
    _decode(bm, seq, 7)  # position 6
    _decode(bm, seq, 8)  # position 7 fills block 1: nothing hashed on the decode path yet
    assert bm.find_cached_prefix(probe) == [0]
    _decode(bm, seq, 9)  # position 8 takes block 2: block 1's KV is computed, it is registered
    assert bm.find_cached_prefix(probe) == [0, 1]


def test_freeing_registers_the_full_blocks_its_last_decodes_computed():
    bm = _bm()
    seq = _seq("a", [1, 2, 3, 4, 5, 6])
    _admit(bm, seq)
    _decode(bm, seq, 7)
    _decode(bm, seq, 8)  # block 1 full and computed
    seq.output_token_ids.append(9)  # sampled, never computed
    bm.free(seq)
    assert bm.find_cached_prefix(_seq("p", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])) == [0, 1]
    assert bm.num_cached_free_blocks == 2


def test_caching_off_never_hits_and_never_registers():
    bm = BlockManager(num_blocks=8, block_size=BLOCK)
    assert not bm.enable_prefix_caching
    first = _seq("a", list(range(1, 11)))
    _admit(bm, first)
    assert bm.find_cached_prefix(_seq("b", list(range(1, 11)))) == []
    bm.free(first)
    assert bm.num_cached_free_blocks == 0 and bm.num_free_blocks == 8


# -- reference counts and the LRU ----------------------------------------------------------


def test_shared_blocks_stay_in_use_until_their_last_holder_frees_them():
    bm = _bm()
    a, b = _seq("a", list(range(1, 11))), _seq("b", list(range(1, 11)))
    _admit(bm, a)
    assert _admit(bm, b) == [0, 1]
    assert bm.num_used_blocks == 4  # 0, 1 shared; 2 and 3 each one's own last block
    bm.free(a)
    assert bm.num_used_blocks == 3 and bm.num_cached_free_blocks == 0  # b still holds 0 and 1
    bm.free(b)
    assert bm.num_used_blocks == 0
    assert bm.num_cached_free_blocks == 2  # the full blocks stay cached; the partial ones do not
    assert bm.num_free_blocks == 8
    assert bm.find_cached_prefix(_seq("c", list(range(1, 11)))) == [0, 1]


def test_free_cached_blocks_count_as_free_not_used():
    bm = _bm(num_blocks=4)
    seq = _seq("a", list(range(1, 13)))
    _admit(bm, seq)
    bm.free(seq)
    stats = bm.stats()
    assert (stats.num_blocks_used, stats.num_blocks_free, stats.num_blocks_cached) == (0, 4, 3)
    assert stats.usage_ratio == 0.0 and stats.num_slots_unused == 0
    assert bm.can_allocate(_seq("b", [9] * 16), 16)  # all four blocks, evicting the cached ones


def test_a_fresh_block_comes_from_plain_free_blocks_before_any_cached_one_is_evicted():
    bm = _bm(num_blocks=4)
    seq = _seq("a", list(range(1, 9)))  # 2 full blocks
    _admit(bm, seq)
    bm.free(seq)
    other = _seq("b", [50] * 8)
    _admit(bm, other)  # takes the two plain blocks 2 and 3
    assert sorted(other.block_table) == [2, 3]
    assert bm.find_cached_prefix(_seq("c", list(range(1, 10)))) == [0, 1]


def test_eviction_takes_the_least_recently_freed_and_a_sequence_frees_its_tail_first():
    bm = _bm(num_blocks=6)
    old = _seq("old", list(range(1, 9)))  # blocks 0, 1
    new = _seq("new", list(range(101, 109)))  # blocks 2, 3
    _admit(bm, old)
    _admit(bm, new)
    bm.free(old)  # LRU: 1, 0 (tail first)
    bm.free(new)  # LRU: 1, 0, 3, 2
    taker = _seq("taker", [7] * 12)  # needs 3 blocks: the 2 plain ones, then evicts block 1
    _admit(bm, taker)
    assert taker.block_table == [4, 5, 1]
    # old's head survived its tail: a prompt sharing only old's first block still hits it.
    assert bm.find_cached_prefix(_seq("p", [1, 2, 3, 4, 0, 0, 0, 0, 0])) == [0]
    assert bm.find_cached_prefix(_seq("q", list(range(1, 10)))) == [0]  # block 1 is gone
    _admit(bm, _seq("taker2", [8] * 4))  # nothing plain is left: the oldest goes, block 0
    assert bm.find_cached_prefix(_seq("r", list(range(101, 110)))) == [2, 3]
    assert bm.find_cached_prefix(_seq("s", list(range(1, 10)))) == []


def test_a_hit_takes_a_free_cached_block_out_of_the_lru_so_it_is_never_evicted_under_it():
    bm = _bm(num_blocks=3)
    seq = _seq("a", list(range(1, 9)))
    _admit(bm, seq)
    bm.free(seq)  # blocks 0, 1 cached; block 2 plain
    sharer = _seq("b", [*range(1, 9), 60, 61, 62, 63, 64])
    cached = bm.find_cached_prefix(sharer)
    assert cached == [0, 1]
    # 5 new tokens need 2 blocks; only 1 is free once the two cached blocks are shared.
    assert not bm.can_allocate(sharer, 5, cached)
    assert bm.can_allocate(sharer, 4, cached)
    bm.allocate(sharer, 4, cached)
    sharer.num_computed_tokens = 12
    assert sharer.block_table == [0, 1, 2] and bm.num_free_blocks == 0


def test_the_watermark_counts_evictable_cached_blocks_as_free():
    bm = _bm(num_blocks=10, watermark_ratio=0.2)  # 2 blocks held back
    seq = _seq("a", list(range(1, 33)))  # 8 blocks
    _admit(bm, seq)
    bm.free(seq)
    assert bm.num_cached_free_blocks == 8
    assert bm.can_allocate(_seq("b", [5] * 32), 32)  # 8 of 10 free blocks, watermark kept
    assert not bm.can_allocate(_seq("c", [5] * 33), 33)


def test_a_duplicate_full_block_is_not_registered_twice():
    bm = _bm()
    a, b = _seq("a", list(range(1, 9))), _seq("b", list(range(1, 9)))
    _admit(bm, a, 8)  # registers blocks 0, 1
    b_cached = bm.find_cached_prefix(b)
    assert b_cached == [0]  # the last-token rule keeps the second block
    _admit(bm, b)  # computes its own copy of block 1 (block 2): same hash, stays plain
    assert b.block_table == [0, 2]
    bm.free(a)
    bm.free(b)
    assert bm.num_cached_free_blocks == 2  # blocks 0 and 1; block 2 is plain


def test_freeing_after_a_failed_forward_drops_the_hashes_of_the_blocks_it_frees():
    bm = _bm()
    seq = _seq("a", list(range(1, 11)))
    _admit(bm, seq)
    bm.free(seq, discard_cached=True)
    assert bm.num_cached_free_blocks == 0 and bm.num_free_blocks == 8
    assert bm.find_cached_prefix(_seq("b", list(range(1, 11)))) == []


# -- the live toggle -----------------------------------------------------------------------


def test_turning_caching_off_drops_the_cache_and_on_again_starts_empty():
    bm = _bm()
    done, running = _seq("done", list(range(1, 11))), _seq("run", list(range(1, 11)))
    _admit(bm, done)
    _admit(bm, running)
    bm.free(done)  # done's own last block is plain; the shared two are still held by running
    bm.set_prefix_caching(False)
    assert not bm.enable_prefix_caching
    assert bm.find_cached_prefix(_seq("p", list(range(1, 11)))) == []
    bm.free(running)  # its blocks, shared ones included, go back as plain blocks
    assert bm.num_cached_free_blocks == 0 and bm.num_used_blocks == 0
    assert sorted(bm._free_blocks) == list(range(8))
    bm.set_prefix_caching(True)
    assert bm.find_cached_prefix(_seq("q", list(range(1, 11)))) == []  # empty
    fresh = _seq("fresh", list(range(1, 11)))
    _admit(bm, fresh)
    assert bm.find_cached_prefix(_seq("r", list(range(1, 11)))) == fresh.block_table[:2]


def test_turning_caching_off_makes_free_cached_blocks_plain_free_blocks():
    bm = _bm(num_blocks=4)
    seq = _seq("a", list(range(1, 13)))
    _admit(bm, seq)
    bm.free(seq)
    assert bm.num_cached_free_blocks == 3
    bm.set_prefix_caching(False)
    assert (bm.num_cached_free_blocks, bm.num_free_blocks, bm.num_used_blocks) == (0, 4, 0)
    assert sorted(bm._free_blocks) == [0, 1, 2, 3]


# -- the cache alone -----------------------------------------------------------------------


def test_prefix_cache_lru_evicts_oldest_first_and_forgets_hashes():
    cache = PrefixCache(4, BLOCK)
    for block, name in enumerate((b"h0", b"h1", b"h2")):
        cache.register(block, name)
    assert not cache.park(3)  # no hash: not cached
    for block in (2, 0, 1):
        assert cache.park(block)
    cache.touch(0)  # a hit: in use again
    assert cache.num_free_cached_blocks == 2
    assert cache.evict() == 2 and cache.get(b"h2") is None
    assert cache.evict() == 1
    assert cache.get(b"h0") == 0 and cache.num_cached_blocks == 1
    assert cache.clear() == [] and cache.get(b"h0") is None


# -- invariants ----------------------------------------------------------------------------

_ops = st.lists(
    st.tuples(
        st.sampled_from(["admit", "chunk", "decode", "free", "toggle"]),
        st.integers(min_value=0, max_value=4),
        st.integers(min_value=1, max_value=12),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, num_blocks=st.integers(min_value=2, max_value=16))
def test_reference_counts_and_free_counts_balance_under_random_operations(ops, num_blocks):
    bm = _bm(num_blocks)
    # Five prompts over a small alphabet, so they share prefixes often.
    prompts = [
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3],
        [1, 2, 3, 4, 5, 6, 7, 8, 2, 2],
        [1, 2, 3, 4, 9, 9, 9, 9, 9],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5],
        [7] * 11,
    ]
    seqs = [_seq(f"r{i}", p) for i, p in enumerate(prompts)]
    for op, index, count in ops:
        seq = seqs[index]
        if op == "admit" and not seq.block_table:
            cached = bm.find_cached_prefix(seq)
            num_new = min(count, seq.num_tokens - len(cached) * BLOCK)
            if bm.can_allocate(seq, num_new, cached):
                bm.allocate(seq, num_new, cached)
                seq.num_computed_tokens = len(cached) * BLOCK + num_new
        elif op == "chunk" and seq.block_table and seq.num_uncomputed_tokens > 1:
            num_new = min(count, seq.num_uncomputed_tokens - 1)
            if bm.can_append(seq, num_new):
                bm.append_slot(seq, num_new)
                seq.num_computed_tokens += num_new
        elif op == "decode" and seq.block_table and seq.num_uncomputed_tokens <= 1:
            if seq.num_uncomputed_tokens == 0:
                seq.output_token_ids.append(count % 3)
            if bm.try_append_decode_slot(seq):
                seq.num_computed_tokens += 1
        elif op == "free":
            bm.free(seq)
            seq.num_computed_tokens = 0
        elif op == "toggle":
            bm.set_prefix_caching(not bm.enable_prefix_caching)
        held: dict[int, int] = {}
        for s in seqs:
            for block in s.block_table:
                held[block] = held.get(block, 0) + 1
        assert held == {b: c for b, c in enumerate(bm._ref_counts) if c}
        assert bm.num_used_blocks == len(held)
        free = set(bm._free_blocks) | set(getattr(bm._prefix_cache, "_free_cached", ()))
        assert len(free) == bm.num_free_blocks == num_blocks - len(held)
        assert not free & set(held)
        stats = bm.stats()
        assert stats.num_slots_unused >= 0
        assert stats.num_blocks_peak >= stats.num_blocks_used
        # A shared block's tokens are the same in every sequence holding it.
        for s in seqs:
            for i, block in enumerate(s.block_table[: s.num_computed_tokens // BLOCK]):
                for t in seqs:
                    if t is not s and block in t.block_table[: t.num_computed_tokens // BLOCK]:
                        assert t.block_table.index(block) == i
                        assert s.token_ids[: (i + 1) * BLOCK] == t.token_ids[: (i + 1) * BLOCK]
    for seq in seqs:
        bm.free(seq)
    assert bm.num_used_blocks == 0 and bm.stats().num_slots_unused == 0
    cached = list(getattr(bm._prefix_cache, "_free_cached", ()))
    assert sorted(bm._free_blocks + cached) == list(range(num_blocks))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_constructor_takes_the_setting(enabled):
    bm = BlockManager(num_blocks=2, block_size=2, enable_prefix_caching=enabled)
    assert bm.enable_prefix_caching is enabled
