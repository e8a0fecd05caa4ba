"""PrefixCache's own bookkeeping (prefix_cache.py), without the block manager: hashes of blocks
that lie wholly in the output, a forgotten block is plain again, clear() leaves a usable cache."""

from __future__ import annotations

import pytest

from reference_server.prefix_cache import PrefixCache, hash_block_tokens
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence


def _seq(prompt: list[int], output: list[int] = ()) -> Sequence:  # type: ignore[assignment]
    seq = Sequence("r", list(prompt), SamplingParams(), priority="interactive", arrival_time=0.0)
    seq.output_token_ids = list(output)
    return seq


def _chain(tokens: list[int], block_size: int) -> list[bytes]:
    out, parent = [], b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, tokens[start : start + block_size])
        out.append(parent)
    return out


@pytest.mark.parametrize(
    ("num_prompt", "num_output"), [(4, 12), (3, 13), (8, 8), (1, 15), (16, 0), (0, 16)]
)
def test_every_block_hash_is_the_chain_over_prompt_then_output(num_prompt, num_output):
    tokens = list(range(100, 100 + num_prompt + num_output))
    seq = _seq(tokens[:num_prompt], tokens[num_prompt:])
    assert PrefixCache(1, 4).block_hashes(seq, 4) == _chain(tokens, 4)


def test_hashes_extend_block_by_block_to_the_same_chain():
    tokens = list(range(20))
    seq = _seq(tokens[:5], tokens[5:])
    cache = PrefixCache(1, 4)
    for n in range(1, 6):
        assert cache.block_hashes(seq, n) == _chain(tokens, 4)[:n]


def test_a_forgotten_block_is_plain_again_and_can_hold_another_hash():
    cache = PrefixCache(4, 2)
    h1, h2 = b"one", b"two"
    cache.register(1, h1)
    cache.forget(1)
    assert cache.get(h1) is None and cache.num_cached_blocks == 0
    assert cache.park(1) is False  # no hash: freed plainly
    cache.register(1, h2)
    assert cache.get(h2) == 1 and cache.park(1) is True


def test_forgetting_a_free_cached_block_takes_it_out_of_the_lru():
    cache = PrefixCache(4, 2)
    cache.register(2, b"x")
    assert cache.park(2) and cache.is_free_cached(2) and cache.num_free_cached_blocks == 1
    cache.forget(2)
    assert not cache.is_free_cached(2) and cache.num_free_cached_blocks == 0
    cache.forget(3)  # a block that holds nothing: nothing to drop
    assert cache.num_cached_blocks == 0


def test_after_clear_blocks_register_and_park_again():
    cache = PrefixCache(3, 2)
    cache.register(0, b"a")
    cache.park(0)
    assert cache.clear() == [0]
    assert cache.num_cached_blocks == 0 and cache.num_free_cached_blocks == 0
    assert cache.park(0) is False
    cache.register(0, b"a")
    cache.register(2, b"c")
    assert cache.get(b"a") == 0 and cache.get(b"c") == 2 and cache.park(2)
    assert cache.evict() == 2 and cache.get(b"c") is None
