"""BlockManager bookkeeping at the edges: construction checks, block arithmetic, which block ids
are handed out and returned, ownership, refusals and the peak snapshot."""

from __future__ import annotations

import pytest

from reference_server.block_manager import BlockManager, BlockManagerStats
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence


def _seq(request_id: str, num_prompt_tokens: int = 1) -> Sequence:
    return Sequence(
        request_id,
        [1] * num_prompt_tokens,
        SamplingParams(),
        priority="interactive",
        arrival_time=0.0,
    )


# -- construction -------------------------------------------------------------------------


def test_default_watermark_is_zero_so_every_block_can_be_admitted():
    bm = BlockManager(num_blocks=2, block_size=4)
    assert bm.watermark_blocks == 0
    seq = _seq("a", 8)
    assert bm.can_allocate(seq, 8)
    bm.allocate(seq, 8)
    assert bm.num_free_blocks == 0


def test_smallest_valid_sizes_are_accepted():
    bm = BlockManager(num_blocks=1, block_size=1, watermark_ratio=0.0)
    assert (bm.num_blocks, bm.block_size, bm.num_free_blocks, bm.num_used_blocks) == (1, 1, 1, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_blocks": 0, "block_size": 4}, "num_blocks must be a positive integer, got 0"),
        ({"num_blocks": True, "block_size": 4}, "num_blocks must be a positive integer, got True"),
        ({"num_blocks": 4.0, "block_size": 4}, "num_blocks must be a positive integer, got 4.0"),
        ({"num_blocks": 4, "block_size": 0}, "block_size must be a positive integer, got 0"),
        ({"num_blocks": 4, "block_size": True}, "block_size must be a positive integer, got True"),
        ({"num_blocks": 4, "block_size": 2.0}, "block_size must be a positive integer, got 2.0"),
        (
            {"num_blocks": 4, "block_size": 4, "watermark_ratio": -0.1},
            r"watermark_ratio must be in \[0, 1\), got -0.1",
        ),
        (
            {"num_blocks": 4, "block_size": 4, "watermark_ratio": 1},
            r"watermark_ratio must be in \[0, 1\), got 1",
        ),
    ],
)
def test_invalid_construction_names_the_bad_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        BlockManager(**kwargs)


def test_watermark_holds_back_the_floor_of_its_share_of_blocks():
    bm = BlockManager(num_blocks=10, block_size=1, watermark_ratio=0.29)  # 2.9 -> 2 blocks
    assert bm.watermark_blocks == 2
    seq = _seq("a", 9)
    assert bm.can_allocate(seq, 8)
    assert not bm.can_allocate(seq, 9)


# -- arithmetic ---------------------------------------------------------------------------


def test_blocks_for_tokens_rounds_up_to_whole_blocks():
    bm = BlockManager(num_blocks=4, block_size=4)
    assert [bm.blocks_for_tokens(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_blocks_needed_counts_only_what_the_table_lacks():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a", 10)
    assert bm.num_blocks_needed(seq, 5) == 2
    bm.allocate(seq, 8)  # 2 blocks
    seq.num_computed_tokens = 6
    assert bm.num_blocks_needed(seq, 2) == 0  # positions 6, 7 are in block 1
    assert bm.num_blocks_needed(seq, 3) == 1
    seq.num_computed_tokens = 0
    assert bm.num_blocks_needed(seq, 1) == 0  # never negative with more blocks than needed


def test_max_new_tokens_with_the_free_pool_below_the_watermark_counts_own_blocks_only():
    bm = BlockManager(num_blocks=4, block_size=4, watermark_ratio=0.5)  # 2 held back
    first, second = _seq("a", 8), _seq("b", 4)
    bm.allocate(first, 8)  # 2 blocks, 2 left = the watermark
    bm.append_slot(second, 4)  # a running sequence dips into it: 1 left
    first.num_computed_tokens = 3
    assert bm.max_new_tokens(first) == (2 + 1) * 4 - 3
    assert bm.max_new_tokens(first, use_watermark=True) == 2 * 4 - 3


def test_max_new_tokens_is_never_negative():
    bm = BlockManager(num_blocks=1, block_size=4)
    holder = _seq("a", 4)
    bm.allocate(holder, 4)
    behind = _seq("b", 6)
    behind.num_computed_tokens = 6  # more computed than its (empty) table holds
    assert bm.max_new_tokens(behind) == 0


def test_can_allocate_and_can_append_accept_exactly_what_fits():
    bm = BlockManager(num_blocks=4, block_size=2, watermark_ratio=0.25)  # 1 held back
    seq = _seq("a", 8)
    assert bm.can_allocate(seq, 6)  # 3 blocks leave exactly the watermark
    assert not bm.can_allocate(seq, 7)
    assert bm.can_append(seq, 8)  # all 4 blocks
    assert not bm.can_append(seq, 9)
    assert bm.can_append(seq)  # one token by default


# -- handing out and returning blocks -----------------------------------------------------


def test_blocks_are_handed_out_lowest_id_first_and_reused_after_free():
    bm = BlockManager(num_blocks=6, block_size=2)
    first, second, third = _seq("a", 6), _seq("b", 2), _seq("c", 4)
    bm.allocate(first, 6)
    bm.allocate(second, 2)
    assert (first.block_table, second.block_table) == ([0, 1, 2], [3])
    bm.free(first)
    assert first.block_table == []
    bm.allocate(third, 4)
    assert third.block_table == [0, 1]  # the freed blocks, lowest first
    assert bm.num_free_blocks == 6 - 3


def test_append_slot_defaults_to_one_token_and_adds_blocks_only_when_full():
    bm = BlockManager(num_blocks=4, block_size=2)
    seq = _seq("a", 2)
    bm.allocate(seq, 2)
    seq.num_computed_tokens = 2
    bm.append_slot(seq)
    assert seq.block_table == [0, 1]
    assert bm.stats().num_slots_unused == 1
    seq.num_computed_tokens = 3
    bm.append_slot(seq)
    assert seq.block_table == [0, 1]
    assert bm.stats().num_slots_unused == 0


def test_refused_allocation_names_the_request_and_changes_nothing():
    bm = BlockManager(num_blocks=2, block_size=2)
    holder, seq = _seq("holder", 2), _seq("late", 6)
    bm.allocate(holder, 2)
    before = bm.stats()
    with pytest.raises(RuntimeError, match=r"^cannot allocate 6 tokens for late$"):
        bm.allocate(seq, 6)
    with pytest.raises(RuntimeError, match=r"^no free block for 6 tokens of late$"):
        bm.append_slot(seq, 6)
    assert seq.block_table == []
    assert not bm.owns_blocks("late")
    assert bm.stats() == before


def test_allocating_zero_tokens_registers_ownership_without_blocks():
    bm = BlockManager(num_blocks=2, block_size=2)
    seq = _seq("a")
    bm.allocate(seq, 0)
    assert bm.owns_blocks("a")
    assert seq.block_table == []
    assert bm.stats().num_slots_unused == 0
    bm.free(seq)
    assert not bm.owns_blocks("a")


def test_a_smaller_request_keeps_the_larger_reservation():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = _seq("a", 6)
    bm.allocate(seq, 6)
    bm.append_slot(seq, 2)  # positions 0, 1: already promised
    stats = bm.stats()
    assert (stats.num_blocks_used, stats.num_slots_unused) == (2, 2)
    assert bm.owns_blocks("a")


def test_freeing_a_sequence_that_holds_nothing_changes_nothing():
    bm = BlockManager(num_blocks=4, block_size=2)
    holder = _seq("a", 3)
    bm.allocate(holder, 3)
    before = bm.stats()
    bm.free(_seq("stranger"))
    assert bm.stats() == before
    assert bm.owns_blocks("a")


def test_reservations_of_several_sequences_add_up_and_free_subtracts_its_own():
    bm = BlockManager(num_blocks=8, block_size=4)
    first, second = _seq("a", 3), _seq("b", 5)
    bm.allocate(first, 3)
    bm.allocate(second, 5)
    assert bm.stats().num_slots_unused == 3 * 4 - 8
    first.num_computed_tokens = 3
    bm.append_slot(first, 2)  # promised 3 -> 5, a second block
    assert bm.stats().num_slots_unused == 4 * 4 - 10
    bm.free(second)
    assert bm.stats().num_slots_unused == 2 * 4 - 5


# -- statistics ---------------------------------------------------------------------------


def test_stats_report_sizes_usage_and_ratios():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a", 10)
    bm.allocate(seq, 10)  # 3 blocks, 12 slots, 10 promised
    stats = bm.stats()
    assert stats == BlockManagerStats(
        block_size=4,
        num_blocks_total=8,
        num_blocks_used=3,
        num_blocks_free=5,
        num_blocks_peak=3,
        num_slots_allocated=12,
        num_slots_unused=2,
        num_slots_unused_at_peak=2,
    )
    assert stats.usage_ratio == pytest.approx(3 / 8)
    assert stats.peak_usage_ratio == pytest.approx(3 / 8)
    assert stats.unused_slots_ratio_at_peak == pytest.approx(2 / 12)


def test_unused_ratio_at_peak_is_zero_before_any_allocation():
    stats = BlockManager(num_blocks=4, block_size=4).stats()
    assert (stats.num_blocks_peak, stats.num_slots_unused_at_peak) == (0, 0)
    assert stats.unused_slots_ratio_at_peak == 0.0
    assert stats.usage_ratio == 0.0


def test_peak_moves_only_upwards_until_reset():
    bm = BlockManager(num_blocks=8, block_size=4)
    big, small = _seq("big", 12), _seq("small", 1)
    bm.allocate(big, 12)  # peak 3 blocks, 0 unused
    bm.free(big)
    bm.allocate(small, 1)  # 1 block: below the peak
    stats = bm.stats()
    assert (stats.num_blocks_peak, stats.num_slots_unused_at_peak) == (3, 0)
    bm.reset_peak()  # the peak restarts from what is held now: 1 block, 3 slots unused
    stats = bm.stats()
    assert (stats.num_blocks_peak, stats.num_slots_unused_at_peak) == (1, 3)
    small.num_computed_tokens = 1
    bm.append_slot(small, 4)  # 2 blocks, 5 promised
    stats = bm.stats()
    assert (stats.num_blocks_peak, stats.num_slots_unused_at_peak) == (2, 3)


def test_can_append_checks_one_token_by_default():
    bm = BlockManager(num_blocks=1, block_size=2)
    seq = _seq("a", 2)
    bm.allocate(seq, 1)
    seq.num_computed_tokens = 1  # one slot left in its only block
    assert bm.can_append(seq)
    assert not bm.can_append(seq, 2)
