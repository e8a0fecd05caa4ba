"""The traffic classes of a mixed profile are dealt from shuffled decks that hold the shares
(loadgen/plan.py): every deck carries the mix, the rounding of a share that does not divide the
deck is carried over, and the order is seeded."""

from __future__ import annotations

import pytest

from loadgen.plan import CLASS_DECK_SIZE, build_plan
from loadgen.profiles import resolve


def _classes(share: float, *, seed: int = 0, n: int = 400) -> list[str]:
    spec = resolve("mixed_lengths", {"long_share": share, "rate_rps": 50, "seed": seed}, "full")
    plan = build_plan(spec)
    assert len(plan) >= n
    return [r.length_class for r in plan[:n]]


def test_every_deck_carries_the_share():
    classes = _classes(0.15)
    for start in range(0, len(classes), CLASS_DECK_SIZE):
        deck = classes[start : start + CLASS_DECK_SIZE]
        assert deck.count("long") == 3, (start, deck)


@pytest.mark.parametrize("share", [0.12, 0.05, 0.5, 0.33])
def test_a_share_that_does_not_divide_the_deck_stays_within_one_request(share):
    classes = _classes(share)
    for end in range(CLASS_DECK_SIZE, len(classes) + 1, CLASS_DECK_SIZE):
        assert abs(classes[:end].count("long") - share * end) <= 1, end


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_share_of_none_or_all(share):
    assert set(_classes(share, n=100)) == {"long" if share else "short"}


def test_the_order_within_decks_is_seeded():
    assert _classes(0.15, seed=3) == _classes(0.15, seed=3)
    assert _classes(0.15, seed=3) != _classes(0.15, seed=4)
    first = _classes(0.15, n=CLASS_DECK_SIZE * 10)
    positions = {tuple(i for i, c in enumerate(first[s : s + CLASS_DECK_SIZE]) if c == "long")
                 for s in range(0, len(first), CLASS_DECK_SIZE)}  # fmt: skip
    assert len(positions) > 1  # shuffled, not one fixed pattern


def test_each_dealt_class_brings_its_own_lengths():
    spec = resolve("mixed_lengths", {"long_share": 0.25, "rate_rps": 50}, "full")
    bounds = {c.length_class: (c.output_tokens.low, c.output_tokens.high) for c in spec.classes}
    assert bounds["long"][0] > bounds["short"][1]  # the two ranges do not overlap
    for request in build_plan(spec)[:200]:
        low, high = bounds[request.length_class]
        assert low <= request.max_tokens <= high, request
