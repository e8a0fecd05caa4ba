"""Block manager edges the other block-manager tests leave open: a cached prefix offered after
admission is refused with its reason, and the block peak counts referenced blocks only (free
cached blocks are free) on the decode path too."""

from __future__ import annotations

import pytest

from reference_server.block_manager import BlockManager
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence

BLOCK = 4


def _seq(request_id: str, tokens: list[int]) -> Sequence:
    return Sequence(
        request_id, list(tokens), SamplingParams(), priority="interactive", arrival_time=0.0
    )


def _bm(num_blocks: int = 16) -> BlockManager:
    return BlockManager(
        num_blocks=num_blocks, block_size=BLOCK, watermark_ratio=0.0, enable_prefix_caching=True
    )


def _admit(bm: BlockManager, seq: Sequence) -> None:
    cached = bm.find_cached_prefix(seq)
    num_cached = len(cached) * BLOCK
    bm.allocate(seq, seq.num_tokens - num_cached, cached)
    seq.num_computed_tokens = seq.num_tokens


def test_a_cached_prefix_is_shared_only_at_admission() -> None:
    bm = _bm()
    first = _seq("first", [1, 2, 3, 4, 5])
    _admit(bm, first)
    bm.free(first)  # its full block [1, 2, 3, 4] stays cached
    late = _seq("late", [1, 2, 3, 4, 9])
    cached = bm.find_cached_prefix(late)
    assert len(cached) == 1
    late.num_computed_tokens = 1  # already computing, though it holds no block yet
    with pytest.raises(ValueError, match=r"^late: a cached prefix is shared only at admission$"):
        bm.can_allocate(late, 1, cached)
    with pytest.raises(ValueError, match="shared only at admission"):
        bm.allocate(late, 1, cached)


def test_the_decode_path_peak_leaves_free_cached_blocks_out() -> None:
    bm = _bm()
    old = _seq("old", [50, 51, 52, 53])
    _admit(bm, old)
    bm.free(old)  # one free cached block
    assert bm.stats().num_blocks_peak == 1
    seq = _seq("new", [1, 2, 3, 4, 5, 6, 7, 8])
    _admit(bm, seq)  # two blocks
    assert bm.stats().num_blocks_peak == 2
    for token in (9, 10):  # the 9th token needs a third block
        seq.output_token_ids.append(token)
        assert bm.try_append_decode_slot(seq)
        seq.num_computed_tokens += 1
    assert bm.stats().num_blocks_peak == 3  # not 4: the cached block is free


def test_allocate_refuses_a_hit_whose_fresh_blocks_would_evict_the_hit_itself() -> None:
    bm = _bm(num_blocks=3)
    old = _seq("old", [1, 2, 3, 4, 5, 6, 7, 8])
    _admit(bm, old)
    bm.free(old)  # two free cached blocks
    other = _seq("other", [90, 91])
    _admit(bm, other)  # the one plain free block
    new = _seq("new", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    cached = bm.find_cached_prefix(new)
    assert len(cached) == 2
    # The hit takes both cached blocks out of the free ones: nothing is left for the 9th token.
    assert not bm.can_allocate(new, 1, cached)
    with pytest.raises(RuntimeError, match=r"^cannot allocate 1 tokens for new$"):
        bm.allocate(new, 1, cached)
