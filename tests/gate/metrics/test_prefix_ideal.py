"""The ideal prefix-cache hit ratio: a trace window's hash-id prefixes through an LRU of the KV
capacity, hits only up to the first miss, keyed by the whole prefix, partial last blocks never
cached, at most input_tokens - 1 tokens served (docs/traces.md)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gate.metrics.prefix_ideal import ideal_hit_ratio

REPO = Path(__file__).resolve().parents[3]
EXCERPT = REPO / "loadgen" / "data" / "mooncake_conversation_excerpt.jsonl"


def _excerpt_rows() -> list[tuple[list[int], int, int]]:
    # Read as plain JSON: the gate never imports loadgen, and neither does its test.
    rows = []
    for line in EXCERPT.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        rows.append((obj["hash_ids"], 512, obj["input_length"]))
    return rows


def test_a_shared_prefix_hits_up_to_the_first_differing_block():
    result = ideal_hit_ratio([([1, 2, 3], 4, 12), ([1, 2, 9], 4, 12)])
    assert (result.hits_tokens, result.queries_tokens, result.num_requests) == (8, 24, 2)
    assert result.ratio == pytest.approx(8 / 24)
    assert result.capacity_tokens is None


def test_a_hit_stops_at_the_first_miss_even_if_later_blocks_are_cached():
    result = ideal_hit_ratio([([1, 2, 3], 4, 12), ([1, 7, 3], 4, 12)])
    assert result.hits_tokens == 4


def test_blocks_are_keyed_by_their_whole_prefix_not_the_bare_id():
    # Block id 2 after 5 is not block id 2 after 1: its KV depends on everything before it.
    result = ideal_hit_ratio([([1, 2], 4, 8), ([5, 2], 4, 8), ([5, 2, 3], 4, 12)])
    assert result.hits_tokens == 0 + 0 + 8


def test_a_partial_last_block_is_not_cached():
    result = ideal_hit_ratio([([1, 2], 4, 6), ([1, 2, 3], 4, 12)])
    assert result.hits_tokens == 4  # block 2 held only 2 of its 4 tokens in the first request


def test_the_last_prompt_token_is_always_computed():
    result = ideal_hit_ratio([([1, 2], 4, 8), ([1, 2], 4, 8)])
    assert result.hits_tokens == 7


def test_requests_without_hash_ids_are_queries_that_never_hit():
    result = ideal_hit_ratio([((), None, 50), ([1], 4, 4), ([1], 4, 10)])
    assert (result.hits_tokens, result.queries_tokens) == (4, 64)


def test_capacity_is_in_tokens_and_holds_whole_blocks():
    rows = [([1, 2], 4, 8), ([3, 4], 4, 8), ([1, 2], 4, 8)]
    assert ideal_hit_ratio(rows, capacity_tokens=16).hits_tokens == 7
    # 15 tokens hold 3 blocks of 4: the first prompt's tail (block 2) went first, its head hits.
    assert ideal_hit_ratio(rows, capacity_tokens=15).hits_tokens == 4
    assert ideal_hit_ratio(rows, capacity_tokens=12).hits_tokens == 4
    assert ideal_hit_ratio(rows, capacity_tokens=11).hits_tokens == 0  # 2 blocks: 3 and 4
    assert ideal_hit_ratio(rows, capacity_tokens=0).hits_tokens == 0


def test_a_request_evicts_its_own_tail_before_its_head():
    # Room for 2 blocks; the 3-block prompt keeps its first two (the reusable prefix).
    rows = [([1, 2, 3], 4, 12), ([1, 2, 9], 4, 12)]
    assert ideal_hit_ratio(rows, capacity_tokens=8).hits_tokens == 8


def test_recently_used_blocks_survive_eviction():
    rows = [([1], 4, 4), ([2], 4, 4), ([1], 4, 8), ([3], 4, 4), ([1], 4, 8), ([2], 4, 8)]
    # Capacity 2 blocks: 1 is touched again before 3 arrives, so 2 is the one evicted.
    result = ideal_hit_ratio(rows, capacity_tokens=8)
    assert result.hits_tokens == 0 + 0 + 4 + 0 + 4 + 0


def test_the_mooncake_excerpt_has_a_substantial_ideal_and_capacity_lowers_it():
    rows = _excerpt_rows()
    infinite = ideal_hit_ratio(rows).ratio
    assert infinite is not None and infinite > 0.15
    ratios = [
        ideal_hit_ratio(rows, capacity_tokens=c).ratio
        for c in (10**9, 4 * 10**6, 10**6, 2 * 10**5, 5 * 10**4, 4 * 512, 0)
    ]
    assert ratios[0] == pytest.approx(infinite)
    assert all(a >= b for a, b in itertools.pairwise(ratios))
    assert ratios[-2] < infinite / 2  # four blocks: little beyond the shared first block
    assert ratios[-1] == 0.0


def test_an_empty_window_has_no_ratio():
    result = ideal_hit_ratio([])
    assert (result.queries_tokens, result.ratio) == (0, None)


@pytest.mark.parametrize(
    ("rows", "capacity", "message"),
    [
        ([([1], 4, 4)], -1, "capacity_tokens"),
        ([([1], 4, 4)], 2.5, "capacity_tokens"),
        ([([1], 4, 0)], None, "input_tokens"),
        ([([1], -4, 4)], None, "block_tokens"),
    ],
)
def test_bad_inputs_raise_value_errors(rows, capacity, message):
    with pytest.raises(ValueError, match=message):
        ideal_hit_ratio(rows, capacity_tokens=capacity)
