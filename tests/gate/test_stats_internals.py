"""gate.stats below its results: what each numerical routine costs and where it stops.

Most of these properties cannot be seen in a returned value, because every shortcut in
gate.stats falls back to the exact answer: the order-statistic bracket, the binary search's
normal-approximation bracket, the side of the incomplete beta the continued fraction is
evaluated on. So they are checked directly: the cuts `order_statistics` takes from its sample
and what it hands to np.partition, the predicate evaluations of `_smallest_k`, the iteration
budget of the continued fraction, and the final bracket of the bisection (width 2^-50). The
mean bounds are in tests/gate/test_stats_mean_internals.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gate import stats
from gate.stats import (
    betainc,
    order_statistics,
    proportion_bounds,
)

# --- order_statistics: the sampled bracket -------------------------------------------------


class _NumpySpy:
    """Stands in for gate.stats's `np`: records np.partition and np.concatenate calls."""

    def __init__(self) -> None:
        self.partitioned: list[tuple[int, list[int]]] = []
        self.concatenated = 0

    def __getattr__(self, name: str):
        return getattr(np, name)

    def partition(self, a, kth):
        self.partitioned.append((len(a), [int(k) for k in np.atleast_1d(kth)]))
        return np.partition(a, kth)

    def concatenate(self, parts):
        self.concatenated += 1
        return np.concatenate(parts)


@pytest.fixture
def spy(monkeypatch):
    numpy_spy = _NumpySpy()
    splits: list[tuple[float | None, float | None, int, int]] = []
    real_split = stats._split

    def split(values, lo_cut, hi_cut):
        below, middle = real_split(values, lo_cut, hi_cut)
        splits.append((lo_cut, hi_cut, below, len(middle)))
        return below, middle

    monkeypatch.setattr(stats, "np", numpy_spy)
    monkeypatch.setattr(stats, "_split", split)
    return SimpleNamespace(np=numpy_spy, splits=splits)


def _bracket(n: int, wanted: list[int]) -> tuple[int, int, int]:
    """(lo_index, hi_index, m) as documented in order_statistics: a sample of every
    (n // 65536)-th value, and 8 sqrt(m max(q (1 - q), 0.01 * 0.99)) + 16 sample ranks of slack
    either side of the wanted ranks' place in it."""
    m = len(range(0, n, max(n // 65536, 1)))
    spread = max(max(r / n * (1 - r / n) for r in (wanted[0], wanted[-1])), 0.01 * 0.99)
    slack = 8 * math.isqrt(int(m * spread) + 1) + 16
    return wanted[0] * m // n - slack, wanted[-1] * m // n + slack, m


def _check_selection(spy, values: np.ndarray, wanted: list[int]) -> tuple[int, int, int]:
    n = len(values)
    lo_index, hi_index, m = _bracket(n, wanted)
    sample = np.sort(values[:: max(n // 65536, 1)])
    assert len(sample) == m
    lo_cut = sample[lo_index] if lo_index > 0 else None
    hi_cut = sample[hi_index] if hi_index < m - 1 else None
    spy.splits.clear()
    spy.np.partitioned.clear()
    got = order_statistics(values, wanted)
    ordered = np.sort(values)
    assert got == {r: float(ordered[r]) for r in wanted}
    ((seen_lo, seen_hi, below, middle),) = spy.splits
    assert (seen_lo, seen_hi) == (lo_cut, hi_cut)
    assert below == (int(np.count_nonzero(values < lo_cut)) if lo_cut is not None else 0)
    # Only the middle is partitioned, at the wanted ranks less what lies below it.
    assert spy.np.partitioned == [(middle, [r - below for r in wanted])]
    assert middle < n
    return lo_index, hi_index, m


_N = 312_000  # m = 78_000: 0.0099 m = 772 and 0.0101 m = 787 lie either side of 28^2


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    return np.random.default_rng(11).normal(size=_N)


@pytest.mark.parametrize(
    "wanted",
    [
        [156_000],  # a median: q (1 - q) = 0.25
        [308_880],  # a p99: q (1 - q) = 0.0099, the floor itself
        [311_800],  # a p99.94: below the floor
        [200],  # the other tail
        [93_600, 101_400],  # q (1 - q) of the first rank (0.21) and of the last (0.22) differ
        [93_600, 250_000],
        [50_000, 60_000, 70_000],
    ],
)
def test_the_bracket_is_the_documented_one(spy, values, wanted) -> None:
    _check_selection(spy, values, wanted)


def test_the_bracket_at_the_edges_of_the_sample(spy, values) -> None:
    # Ranks whose bracket starts exactly at sample rank 0 or 1 and ends exactly at m - 2 or
    # m - 1: rank 0 and the last rank are no cut at all (nothing lies beyond them).
    wanted_at = {}
    for r in [*range(0, 5000), *range(_N - 5000, _N)]:
        lo_index, hi_index, m = _bracket(_N, [r])
        if lo_index in (0, 1):
            wanted_at.setdefault(("lo", lo_index), r)
        if hi_index in (m - 2, m - 1):
            wanted_at.setdefault(("hi", hi_index - m), r)
    assert set(wanted_at) == {("lo", 0), ("lo", 1), ("hi", -2), ("hi", -1)}
    for (side, where), r in wanted_at.items():
        lo_index, hi_index, m = _check_selection(spy, values, [r])
        assert (lo_index if side == "lo" else hi_index - m) == where
        if (side, where) == ("lo", 0):
            assert spy.splits[0][0] is None
        if (side, where) == ("hi", -1):
            assert spy.splits[0][1] is None


def test_a_rank_whose_slack_term_is_one_below_a_square(spy, values) -> None:
    # int(m * spread) + 2 a perfect square: the +1 under the square root counts.
    for r in range(1000, _N // 2, 13):
        m = _bracket(_N, [r])[2]
        term = int(m * (r / _N) * (1 - r / _N))
        if math.isqrt(term + 2) ** 2 == term + 2 and term > m * 0.0099:
            break
    else:
        raise AssertionError("no such rank")
    _check_selection(spy, values, [r])


def test_arrays_from_2_pow_18_values_are_bracketed(spy) -> None:
    values = np.random.default_rng(3).normal(size=1 << 18)
    _check_selection(spy, values, [131_072])
    spy.splits.clear()
    spy.np.partitioned.clear()
    smaller = values[:-1]
    got = order_statistics(smaller, [1000, 2000])
    assert got == {r: float(np.sort(smaller)[r]) for r in (1000, 2000)}
    assert spy.splits == []  # one plain partition
    assert spy.np.partitioned == [((1 << 18) - 1, [1000, 2000])]


def test_ties_at_the_lower_cut_still_take_the_shortcut(spy) -> None:
    # 0s only where the stride does not look (odd positions), 1s elsewhere: the sample is all
    # 1s, so the lower cut is 1 and exactly the 0s lie below it. The first wanted rank is the
    # first 1: below == that rank, which the shortcut can serve.
    n = 300_000
    values = np.ones(n)
    values[1 : 2 * 60_000 : 2] = 0.0
    got = order_statistics(values, [60_000, 200_000])
    assert got == {60_000: 1.0, 200_000: 1.0}
    ((lo_cut, hi_cut, below, middle),) = spy.splits
    assert (lo_cut, hi_cut, below, middle) == (1.0, 1.0, 60_000, n - 60_000)
    assert spy.np.partitioned == [(n - 60_000, [0, 140_000])]


def test_a_wanted_rank_just_past_the_middle_falls_back_to_a_full_partition(spy) -> None:
    # 2s only at odd positions: the sample is all 1s, both cuts are 1, the middle is every 1,
    # and the last wanted rank is the first 2, one past the middle: the full partition.
    n = 300_000
    values = np.ones(n)
    values[1 : 2 * 60_000 : 2] = 2.0
    got = order_statistics(values, [100_000, n - 60_000])
    assert got == {100_000: 1.0, n - 60_000: 2.0}
    ((lo_cut, hi_cut, below, middle),) = spy.splits
    assert (lo_cut, hi_cut, below, middle) == (1.0, 1.0, 0, n - 60_000)
    assert spy.np.partitioned == [(n, [100_000, n - 60_000])]


def test_split_in_two_slices_and_in_one(monkeypatch, spy) -> None:
    monkeypatch.setattr(stats, "_SPLIT_SLICE", 4)
    values = np.array([5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0])
    below, middle = stats._split(values, 3.0, 7.0)
    assert below == 2 and middle.tolist() == [5.0, 3.0, 7.0, 4.0]
    assert spy.np.concatenated == 1
    # One slice: its values are the middle as they are, no copy into a new array.
    below, middle = stats._split(values[:4], 2.0, 8.0)
    assert below == 1 and middle.tolist() == [5.0, 3.0]
    assert spy.np.concatenated == 1
    below, middle = stats._split(values[:1], None, None)
    assert below == 0 and middle.tolist() == [5.0]


# --- the binary search over ranks and its normal bracket -----------------------------------


def test_normal_bracket_values() -> None:
    # sd = 50: centre 5000 + 50 + 0.5, margin 16 + 12.5
    assert stats._normal_bracket(10_000, 0.5, 1.0) == (5022, 5079)
    # sd = sqrt(100 * 0.1 * 0.9) = 3: centre 10 - 6 + 0.5 = 4.5, margin 16.75
    assert stats._normal_bracket(100, 0.1, -2.0) == (-13, 22)


class _Counting:
    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.asked: list[int] = []

    def __call__(self, k: int) -> bool:
        self.asked.append(k)
        return k >= self.answer


@pytest.mark.parametrize("answer", [0, 1, 7, 999, 1000, 1001])
def test_smallest_k_searches_zero_to_n_plus_one(answer: int) -> None:
    assert stats._smallest_k(1000, _Counting(answer)) == answer


def test_smallest_k_never_answers_past_n_plus_one() -> None:
    assert stats._smallest_k(1000, lambda k: k >= 2000) == 1001
    # a bracket reaching past n + 1 is cut there (predicate(1001) false: not a bracket)
    assert stats._smallest_k(1000, lambda k: k >= 1002, near=(990, 1010)) == 1001


def test_a_valid_bracket_saves_evaluations() -> None:
    low = _Counting(1)
    assert stats._smallest_k(1000, low, near=(-5, 3)) == 1
    assert low.asked == [0, 3, 2, 1]  # a below 0 is clamped to 0, then searched in (0, 3]
    high = _Counting(1000)
    assert stats._smallest_k(1000, high, near=(997, 1010)) == 1000
    assert high.asked == [997, 1001, 999, 1000]  # b past n + 1 is clamped to n + 1
    whole = _Counting(500)
    assert stats._smallest_k(1000, whole, near=(600, 700)) == 500  # not a bracket: ignored
    assert whole.asked[:2] == [600, 500] and len(whole.asked) == 10  # the whole of [0, 1001]


# --- the incomplete beta -------------------------------------------------------------------


def test_the_continued_fraction_is_taken_on_the_side_where_it_converges(monkeypatch) -> None:
    # Directly for x < (a + 1) / (a + b + 2) (3/7 for a = 2, b = 3), else for 1 - x with a, b
    # swapped.
    calls: list[tuple[float, float, float]] = []
    real = stats._betacf
    monkeypatch.setattr(stats, "_betacf", lambda a, b, x: calls.append((a, b, x)) or real(a, b, x))
    for x in (0.37, 0.4, 3 / 7, 0.5, 0.58):
        betainc(2.0, 3.0, x)
    assert calls == [
        (2.0, 3.0, 0.37),
        (2.0, 3.0, 0.4),
        (3.0, 2.0, 1.0 - 3 / 7),
        (3.0, 2.0, 0.5),
        (3.0, 2.0, 1.0 - 0.58),
    ]


def test_the_continued_fraction_gives_up_after_its_budget(monkeypatch) -> None:
    # 200 + 20 sqrt(max(a, b)) terms (234 for b = 3), each taking five absolute values (two
    # guards of d, two of c, the convergence test) after the first guard's one.
    monkeypatch.setattr(stats, "_EPS", 0.0)
    taken = []
    monkeypatch.setattr(stats, "abs", lambda v: taken.append(v) or abs(v), raising=False)
    with pytest.raises(stats.StatsError):
        stats._betacf(2.0, 3.0, 0.3)
    assert len(taken) == 1 + 5 * 234
    taken.clear()
    with pytest.raises(stats.StatsError):
        stats._betacf(49.0, 2.0, 0.3)
    assert len(taken) == 1 + 5 * 340


def test_a_zero_first_denominator_is_replaced_not_divided_by() -> None:
    # 1 - (a + b) x / (a + 1) is exactly 0 at a = 1, b = 3, x = 1/2 (Lentz's guard).
    assert stats._betacf(1.0, 3.0, 0.5) == pytest.approx(14 / 3, rel=1e-12)


@pytest.mark.parametrize(
    ("a", "b", "x", "where"),
    [
        (0.5, 2.5, 0.625, "d of the even step, m = 1"),
        (4.25, 22.75, 0.625, "c of the even step, m = 2"),
        (1.0, 7.0, 0.5, "d of the odd step, m = 2"),
        (2.0, 22.0, 0.5, "c of the odd step, m = 1"),
    ],
)
def test_a_zero_in_the_recurrence_is_replaced_not_divided_by(a, b, x, where) -> None:
    # Found by search: at these dyadic arguments one of the four guarded values is exactly 0 in
    # floating point (beyond the side betainc would use, so only the guard is tested).
    assert math.isfinite(stats._betacf(a, b, x)), where


# --- the bisection -------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n", "confidence"), [(3, 10, 0.95), (1, 7, 0.9), (40, 41, 0.99)])
def test_a_beta_quantile_is_the_midpoint_of_a_2_pow_minus_50_bracket(k, n, confidence) -> None:
    # 50 halvings of [0, 1] (the first width <= 1e-15), then the midpoint: an odd multiple of
    # 2^-51 within 2^-51 of the root.
    b = proportion_bounds(k, n, confidence=confidence)
    scaled = b.lower * 2.0**51
    assert scaled == int(scaled) and int(scaled) % 2 == 1
    below, above = b.lower - 2.0**-51, b.lower + 2.0**-51
    alpha = 1.0 - confidence
    assert 1.0 - stats.binom_cdf(k - 1, n, below) <= alpha <= 1.0 - stats.binom_cdf(k - 1, n, above)


def test_a_root_on_a_midpoint_is_approached_from_below() -> None:
    # I_x(1, 1) = x: the first midpoint 0.5 is the root itself; it counts as above the target,
    # so the search closes in from below.
    assert betainc(1.0, 1.0, 0.5) == 0.5
    assert proportion_bounds(1, 1, confidence=0.5).lower == 0.5 - 2.0**-51
