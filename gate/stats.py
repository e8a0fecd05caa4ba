"""Exact small-sample statistics for verdicts that neither flake nor lie (no scipy).

Owns the regularized incomplete beta function, binomial tail probabilities, Clopper–Pearson
bounds for a proportion, distribution-free order-statistic bounds for a quantile, and Student-t
bounds for a mean. Every bound here is ONE-SIDED at the given confidence: a gate asks "is the
exceedance share surely below the limit?" (upper bound) and "surely above?" (lower bound)
separately, which is what makes a p99 need >= 299 samples to pass at 95 %. Intervals shown to
people are two-sided: both bounds at `two_sided(confidence)`. It does not know
gates, metrics or units.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Bounds",
    "StatsError",
    "betainc",
    "binom_cdf",
    "mean_bounds",
    "order_statistics",
    "proportion_bounds",
    "quantile_bounds",
    "quantile_ranks",
    "quantile_with_bounds",
    "two_sided",
]

_EPS = 1e-15
_TINY = 1e-300


class StatsError(ArithmeticError):
    """A numerical routine that did not converge (the message says which)."""


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """One-sided lower and upper bounds, each holding with probability >= `confidence`."""

    lower: float
    upper: float
    confidence: float


def _betacf(a: float, b: float, x: float) -> float:
    # Modified Lentz continued fraction (Numerical Recipes 6.4); converges in
    # O(sqrt(max(a, b))) terms for x < (a + 1) / (a + b + 2).
    max_iterations = 200 + int(20 * math.sqrt(max(a, b)))
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, max_iterations + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise StatsError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if a <= 0 or b <= 0:
        raise ValueError("betainc needs a > 0 and b > 0")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    return betainc(n - k, k + 1, 1.0 - p)


def _bisect(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    # f increasing on [lo, hi]; 80 halvings reach double precision for any bracket in [0, 1].
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, abs(hi)):
            break
    return 0.5 * (lo + hi)


def _beta_ppf(probability: float, a: float, b: float) -> float:
    return _bisect(lambda x: betainc(a, b, x), probability, 0.0, 1.0)


def _check_confidence(confidence: float) -> float:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must lie in [0.5, 1), got {confidence}")
    return 1.0 - confidence


def proportion_bounds(k: int, n: int, *, confidence: float) -> Bounds:
    """Clopper–Pearson one-sided bounds for the share behind `k` successes in `n` trials."""
    alpha = _check_confidence(confidence)
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    lower = 0.0 if k == 0 else _beta_ppf(alpha, k, n - k + 1)
    upper = 1.0 if k == n else _beta_ppf(1.0 - alpha, k + 1, n - k)
    return Bounds(lower=lower, upper=upper, confidence=confidence)


def _smallest_k(n: int, predicate: Callable[[int], bool]) -> int:
    # Smallest k in [0, n + 1] with predicate(k) true, predicate monotone in k.
    lo, hi = 0, n + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@functools.lru_cache(maxsize=256)
def quantile_ranks(n: int, q: float, *, confidence: float) -> tuple[int | None, int | None]:
    """1-based ranks of the order statistics bounding the q-quantile (None: not enough data).

    The count B of samples below the true quantile is Binomial(n, q); the l-th order
    statistic lies below the quantile unless B < l, so the lower rank is the largest l with
    P(B <= l - 1) <= alpha; the upper rank the smallest u with P(B >= u) <= alpha.
    """
    alpha = _check_confidence(confidence)
    if n <= 0:
        return None, None
    first_bad = _smallest_k(n, lambda l_: l_ >= 1 and binom_cdf(l_ - 1, n, q) > alpha)
    lower = first_bad - 1
    upper = _smallest_k(n, lambda u: u >= 1 and 1.0 - binom_cdf(u - 1, n, q) <= alpha)
    return (lower if lower >= 1 else None), (upper if 1 <= upper <= n else None)


_SELECT_MIN = 1 << 18  # below this, one np.partition is already fast
_SELECT_SAMPLE = 1 << 16


def order_statistics(values: np.ndarray, ranks: list[int]) -> dict[int, float]:
    """The values at 0-based `ranks` of sorted(values), exactly; {rank: value}.

    Large arrays: a strided sample brackets the wanted ranks with two cut values, one pass
    counts what lies below the lower cut, and only the values between the cuts are partitioned
    (a p99 of 32M gaps partitions ~2 % of them instead of all). Whenever the cuts fail to
    bracket the ranks it falls back to partitioning everything, so the answer never depends on
    the sample; tests compare it with a full sort.
    """
    n = len(values)
    wanted = sorted(set(ranks))
    if n >= _SELECT_MIN and wanted:
        step = max(n // _SELECT_SAMPLE, 1)
        sample = np.sort(values[::step])
        m = len(sample)
        slack = 8 * math.isqrt(m) + 16  # many standard errors of a rank estimated from m draws
        lo_index = wanted[0] * m // n - slack
        hi_index = wanted[-1] * m // n + slack
        lo_cut = sample[lo_index] if lo_index > 0 else None
        hi_cut = sample[hi_index] if hi_index < m - 1 else None
        keep = np.ones(n, dtype=bool) if lo_cut is None else values >= lo_cut
        if hi_cut is not None:
            keep &= values <= hi_cut
        below = 0 if lo_cut is None else int(np.count_nonzero(values < lo_cut))
        middle = values[keep]
        if below <= wanted[0] and wanted[-1] < below + len(middle):
            ordered = np.partition(middle, [r - below for r in wanted])
            return {r: float(ordered[r - below]) for r in wanted}
    ordered = np.partition(values, wanted) if wanted else values
    return {r: float(ordered[r]) for r in wanted}


def quantile_bounds(values: np.ndarray, q: float, *, confidence: float) -> Bounds:
    """Distribution-free one-sided bounds for the q-quantile of (unsorted) samples."""
    return quantile_with_bounds(values, q, confidence=confidence)[1]


def quantile_with_bounds(
    values: np.ndarray, q: float, *, confidence: float
) -> tuple[float, Bounds]:
    """The sample q-quantile (numpy's default linear interpolation) and its bounds, from one
    selection of the few order statistics needed (`order_statistics`)."""
    n = len(values)
    if n == 0:
        return math.nan, Bounds(lower=-math.inf, upper=math.inf, confidence=confidence)
    lower_rank, upper_rank = quantile_ranks(n, q, confidence=confidence)
    position = (n - 1) * q
    below, above = math.floor(position), min(math.ceil(position), n - 1)
    kth = sorted({below, above, *(r - 1 for r in (lower_rank, upper_rank) if r is not None)})
    ordered = order_statistics(values, kth)
    low_value, high_value = float(ordered[below]), float(ordered[above])
    value = low_value + (high_value - low_value) * (position - below)
    return value, Bounds(
        lower=float(ordered[lower_rank - 1]) if lower_rank is not None else -math.inf,
        upper=float(ordered[upper_rank - 1]) if upper_rank is not None else math.inf,
        confidence=confidence,
    )


def two_sided(confidence: float) -> float:
    """The one-sided level whose pair of bounds forms a two-sided interval at `confidence`."""
    return 1.0 - (1.0 - confidence) / 2.0


def _t_cdf(t: float, dof: float) -> float:
    tail = 0.5 * betainc(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t >= 0 else tail


def _t_ppf(probability: float, dof: float) -> float:
    hi = 1.0
    while _t_cdf(hi, dof) < probability:
        hi *= 2.0
        if hi > 1e12:
            raise StatsError("t quantile out of range")
    return _bisect(lambda t: _t_cdf(t, dof), probability, 0.0, hi)


def mean_bounds(values: np.ndarray, *, confidence: float) -> Bounds:
    """Student-t one-sided bounds for the mean (approximate for skewed data at small n)."""
    _check_confidence(confidence)
    n = len(values)
    if n == 0:
        return Bounds(lower=-math.inf, upper=math.inf, confidence=confidence)
    mean = float(np.mean(values))
    if n == 1:
        return Bounds(lower=-math.inf, upper=math.inf, confidence=confidence)
    std_error = float(np.std(values, ddof=1)) / math.sqrt(n)
    half = _t_ppf(confidence, n - 1) * std_error
    return Bounds(lower=mean - half, upper=mean + half, confidence=confidence)
