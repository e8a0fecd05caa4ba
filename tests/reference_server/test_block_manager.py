"""BlockManager: ownership and counting invariants under random operation sequences, the
watermark, and the slot statistics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _check_invariants(bm: BlockManager, seqs: list[Sequence]) -> None:
    owned = [block for seq in seqs for block in seq.block_table]
    assert len(owned) == len(set(owned)), "a block is owned twice"
    assert bm.num_free_blocks + bm.num_used_blocks == bm.num_blocks
    assert len(owned) == bm.num_used_blocks
    assert all(0 <= block < bm.num_blocks for block in owned)


_ops = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "free", "compute"]),
        st.integers(min_value=0, max_value=5),
        st.integers(min_value=1, max_value=40),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=_ops,
    num_blocks=st.integers(min_value=1, max_value=24),
    block_size=st.integers(min_value=1, max_value=8),
    watermark_ratio=st.sampled_from([0.0, 0.1, 0.25]),
)
def test_no_block_owned_twice_and_counts_balance_under_random_operations(
    ops, num_blocks, block_size, watermark_ratio
):
    bm = BlockManager(num_blocks=num_blocks, block_size=block_size, watermark_ratio=watermark_ratio)
    seqs = [_seq(f"r{i}", num_prompt_tokens=50) for i in range(6)]
    for op, index, count in ops:
        seq = seqs[index]
        if op == "allocate":
            if bm.can_allocate(seq, count):
                bm.allocate(seq, count)
            else:
                with pytest.raises(RuntimeError):
                    bm.allocate(seq, count)
        elif op == "append":
            if bm.can_append(seq, count):
                bm.append_slot(seq, count)
                assert len(seq.block_table) * block_size >= seq.num_computed_tokens + count
        elif op == "free":
            bm.free(seq)
            seq.num_computed_tokens = 0
        else:  # the engine computed the tokens the sequence holds slots for
            seq.num_computed_tokens = min(len(seq.block_table) * block_size, 50)
        _check_invariants(bm, seqs)
        stats = bm.stats()
        assert stats.num_slots_unused >= 0
        assert stats.num_blocks_peak >= stats.num_blocks_used
    for seq in seqs:
        bm.free(seq)
    assert bm.num_used_blocks == 0
    assert bm.stats().num_slots_unused == 0
    assert sorted(bm._free_blocks) == list(range(num_blocks))


def test_watermark_blocks_admission_but_not_appends():
    bm = BlockManager(num_blocks=10, block_size=4, watermark_ratio=0.2)  # 2 blocks held back
    first, second = _seq("a"), _seq("b")
    assert bm.can_allocate(first, 32)  # 8 blocks leave exactly the watermark
    bm.allocate(first, 32)
    assert not bm.can_allocate(second, 1)
    assert bm.can_append(second, 1)  # a running sequence may dip into the watermark
    bm.append_slot(second, 8)
    assert bm.num_free_blocks == 0
    assert not bm.can_append(second, 9)


def test_stats_count_allocated_but_unused_slots_and_peak():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = _seq("a")
    bm.allocate(seq, 5)  # 2 blocks, 8 slots, 5 promised
    stats = bm.stats()
    assert (stats.num_blocks_used, stats.num_slots_allocated, stats.num_slots_unused) == (2, 8, 3)
    assert stats.num_blocks_peak == 2
    assert stats.num_slots_unused_at_peak == 3
    seq.num_computed_tokens = 5
    bm.append_slot(seq, 1)  # fits in the second block
    assert bm.stats().num_slots_unused == 2
    bm.free(seq)
    stats = bm.stats()
    assert (stats.num_blocks_used, stats.num_slots_unused, stats.num_blocks_peak) == (0, 0, 2)
    assert stats.peak_usage_ratio == pytest.approx(0.25)


def test_max_new_tokens_counts_own_and_free_blocks():
    bm = BlockManager(num_blocks=4, block_size=4, watermark_ratio=0.25)
    seq = _seq("a")
    bm.allocate(seq, 3)
    seq.num_computed_tokens = 3
    assert bm.max_new_tokens(seq) == 4 * 4 - 3
    assert bm.max_new_tokens(seq, use_watermark=True) == 3 * 4 - 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_blocks": 0, "block_size": 4},
        {"num_blocks": 4, "block_size": 0},
        {"num_blocks": 4, "block_size": 4, "watermark_ratio": 1.0},
    ],
)
def test_invalid_construction_raises(kwargs):
    with pytest.raises(ValueError):
        BlockManager(**kwargs)
