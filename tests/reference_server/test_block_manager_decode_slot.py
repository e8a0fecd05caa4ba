"""BlockManager.try_append_decode_slot, the per-step hot path: when it takes a block, what it
reserves, when it refuses, and how it moves the peak statistics."""

from __future__ import annotations

from reference_server.block_manager import BlockManager
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


def test_decode_slot_fills_the_current_block_before_taking_a_new_one():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = _seq("a", 4)
    bm.allocate(seq, 4)
    seq.num_computed_tokens = 3  # position 3 is the last slot of block 0
    assert bm.try_append_decode_slot(seq) is True
    assert seq.block_table == [0]
    assert bm.num_free_blocks == 3
    seq.num_computed_tokens = 4  # position 4 is exactly one past the table: a new block
    assert bm.try_append_decode_slot(seq) is True
    assert seq.block_table == [0, 1]
    assert bm.num_free_blocks == 2


def test_decode_slot_hands_out_the_lowest_free_block():
    bm = BlockManager(num_blocks=4, block_size=2)
    first, second, third = _seq("a"), _seq("b"), _seq("c")
    bm.allocate(first, 2)  # block 0
    bm.allocate(second, 2)  # block 1
    bm.free(first)
    assert bm.try_append_decode_slot(third) is True  # a sequence with no block yet
    assert third.block_table == [0]
    second.num_computed_tokens = 2
    assert bm.try_append_decode_slot(second) is True
    assert second.block_table == [1, 2]


def test_decode_slot_without_a_free_block_returns_false_and_changes_nothing():
    bm = BlockManager(num_blocks=1, block_size=2)
    seq = _seq("a", 2)
    bm.allocate(seq, 2)
    seq.num_computed_tokens = 2
    before = bm.stats()
    assert bm.try_append_decode_slot(seq) is False
    assert seq.block_table == [0]
    assert bm.stats() == before
    newcomer = _seq("b")
    assert bm.try_append_decode_slot(newcomer) is False
    assert newcomer.block_table == []
    assert not bm.owns_blocks("b")
    assert bm.stats() == before


def test_decode_slot_succeeds_on_the_last_free_block_and_then_refuses():
    bm = BlockManager(num_blocks=2, block_size=1)
    seq = _seq("a")
    assert bm.try_append_decode_slot(seq) is True
    seq.num_computed_tokens = 1
    assert bm.try_append_decode_slot(seq) is True
    assert (seq.block_table, bm.num_free_blocks) == ([0, 1], 0)
    seq.num_computed_tokens = 2
    assert bm.try_append_decode_slot(seq) is False
    assert seq.block_table == [0, 1]


def test_decode_slot_reserves_one_slot_past_the_computed_tokens():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a", 3)
    bm.allocate(seq, 3)  # 1 block, 3 slots promised
    assert bm.stats().num_slots_unused == 1
    seq.num_computed_tokens = 3
    assert bm.try_append_decode_slot(seq)  # promises slot 3: the block is full
    assert bm.stats().num_slots_unused == 0
    seq.num_computed_tokens = 4
    assert bm.try_append_decode_slot(seq)  # a new block, slot 4 promised, 3 left over
    stats = bm.stats()
    assert (stats.num_blocks_used, stats.num_slots_unused) == (2, 3)


def test_decode_slot_reservations_of_several_sequences_add_up():
    bm = BlockManager(num_blocks=8, block_size=4)
    first, second = _seq("a", 2), _seq("b", 2)
    bm.allocate(first, 2)
    bm.allocate(second, 2)
    first.num_computed_tokens = second.num_computed_tokens = 2
    assert bm.try_append_decode_slot(first)
    assert bm.try_append_decode_slot(second)
    assert bm.stats().num_slots_unused == 2 * 4 - 3 - 3
    bm.free(first)
    assert bm.stats().num_slots_unused == 4 - 3
    bm.free(second)
    assert bm.stats().num_slots_unused == 0


def test_decode_slot_never_shrinks_a_larger_reservation():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a", 8)
    bm.allocate(seq, 8)  # 2 blocks, all 8 slots promised
    seq.num_computed_tokens = 2
    assert bm.try_append_decode_slot(seq)
    assert bm.stats().num_slots_unused == 0
    assert seq.block_table == [0, 1]


def test_decode_slot_registers_a_sequence_that_held_no_block():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = _seq("a")
    assert not bm.owns_blocks("a")
    assert bm.try_append_decode_slot(seq)
    assert bm.owns_blocks("a")
    assert seq.block_table == [0]
    assert bm.stats().num_slots_unused == 3
    bm.free(seq)
    assert not bm.owns_blocks("a")
    assert bm.stats().num_slots_unused == 0


def test_decode_slot_raises_the_peak_when_it_takes_a_block_beyond_it():
    bm = BlockManager(num_blocks=8, block_size=2)
    seq = _seq("a", 2)
    bm.allocate(seq, 2)
    assert (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak) == (1, 0)
    seq.num_computed_tokens = 2
    assert bm.try_append_decode_slot(seq)
    stats = bm.stats()
    assert stats.num_blocks_peak == 2
    assert stats.num_slots_unused_at_peak == 2 * 2 - 3


def test_decode_slot_within_the_block_leaves_the_peak_alone():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a", 2)
    bm.allocate(seq, 2)
    bm.reset_peak()
    peak = (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak)
    assert peak == (1, 2)
    seq.num_computed_tokens = 2
    assert bm.try_append_decode_slot(seq)  # no new block: the peak snapshot stays as it was
    assert (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak) == peak


def test_decode_slot_back_up_to_an_earlier_peak_keeps_that_peak_snapshot():
    bm = BlockManager(num_blocks=8, block_size=2)
    decoding, other = _seq("a", 2), _seq("b", 1)
    bm.allocate(decoding, 2)
    bm.allocate(other, 1)
    assert (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak) == (2, 1)
    third = _seq("c", 2)
    bm.allocate(third, 2)  # the peak: 3 blocks, 6 slots, 2 + 1 + 2 promised
    assert (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak) == (3, 1)
    bm.free(third)
    decoding.num_computed_tokens = 2
    assert bm.try_append_decode_slot(decoding)  # back to 3 blocks, now with 3 + 1 promised
    stats = bm.stats()
    assert stats.num_blocks_used == 3
    assert (stats.num_blocks_peak, stats.num_slots_unused_at_peak) == (3, 1)
    fourth = _seq("d", 1)
    bm.allocate(fourth, 1)  # 4 blocks: a new peak, taken with the slots promised now
    assert (bm.stats().num_blocks_peak, bm.stats().num_slots_unused_at_peak) == (4, 8 - 5)


def test_decode_slot_matches_append_slot_of_one_token():
    """The hot path is a shortcut of append_slot(seq, 1): same blocks, same statistics."""
    fast, slow = BlockManager(num_blocks=6, block_size=3), BlockManager(num_blocks=6, block_size=3)
    fast_seqs = [_seq("a", 2), _seq("b", 4)]
    slow_seqs = [_seq("a", 2), _seq("b", 4)]
    for bm, seqs in ((fast, fast_seqs), (slow, slow_seqs)):
        for seq in seqs:
            bm.allocate(seq, seq.num_prompt_tokens)
            seq.num_computed_tokens = seq.num_prompt_tokens
    refusals = 0
    for _ in range(8):  # 6 blocks hold 18 slots: the last rounds run out
        for f, s in zip(fast_seqs, slow_seqs, strict=True):
            fits = slow.can_append(s, 1)
            assert fast.try_append_decode_slot(f) is fits
            if fits:
                slow.append_slot(s, 1)
                f.num_computed_tokens += 1
                s.num_computed_tokens += 1
            else:
                refusals += 1
            assert f.block_table == s.block_table
            assert fast.stats() == slow.stats()
    assert refusals > 0
