"""Anytime-valid bounds for data that is looked at again and again while it grows (no scipy).

Owns the sequential counterparts of `gate.stats`' one-shot rules, for checks repeated during a
run (`abort_on_fail`): a one-sided test that a Bernoulli share exceeds a limit, the lower
confidence sequence of a share that it implies, the exceedance counts at which it fires, and
the quantile form. The one-shot Clopper–Pearson rule re-applied every second is wrong about 1 in
6 times over a two-minute run (each look spends another alpha); these hold at `confidence`
simultaneously over every sample size, however often and whenever one looks.

The construction is a mixture martingale with Ville's inequality: for H0 "share <= p0",
M_n = sum_j w_j (p_j / p0)^k ((1 - p_j) / (1 - p0))^(n - k), over a fixed grid of alternatives
p_j above p0 whose odds are 1.5^j times p0's (j = 1..8, weights 1/8), is a nonnegative
supermartingale with M_0 = 1 under every share <= p0, so P(M_n >= 1/alpha for some n) <= alpha.
A discrete grid rather than a beta prior keeps it one-sided (all the power against shares above
p0) in closed form, and M_n falls as p0 rises, so inverting it over p0 gives a lower bound by
bisection. It does not know gates or metrics.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "anytime_exceedance_thresholds",
    "anytime_proportion_lower_bound",
    "anytime_quantile_lower_bound",
    "anytime_share_exceeds",
]

# Alternatives at 1.5x .. 25.6x the odds of the limit: a ratio of 1.5 loses little power between
# grid points. Measured at a p99 limit (tests/gate/test_stats_anytime.py): 8 points detect a 2x-5x
# exceedance share ~15-20 % sooner than 16 reaching 657x, and a 10x one as soon; beyond 25x the
# last point still fires within a few samples.
_RATIO = 1.5
_POINTS = 8
_LOG_RATIOS = np.log(_RATIO) * np.arange(1, _POINTS + 1)


def _alpha(confidence: float) -> float:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must lie in [0.5, 1), got {confidence}")
    return 1.0 - confidence


def _log_mixture(hits: np.ndarray, total: np.ndarray, share: float) -> np.ndarray:
    # log M_n for 0 < share < 1, elementwise over hits/total. Alternative j has odds c_j times
    # the tested odds o, so its log likelihood ratio is k log c_j + n log((1 + o) / (1 + c_j o)):
    # every alternative stays below 1 however close `share` is to 1, and each term falls as
    # `share` rises (d/do log((1 + o) / (1 + c o)) = (1 - c) / ((1 + o)(1 + c o)) < 0).
    odds = share / (1.0 - share)
    per_trial = math.log1p(odds) - np.log1p(np.exp(_LOG_RATIOS) * odds)
    hits = np.asarray(hits, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    terms = np.multiply.outer(_LOG_RATIOS, hits) + np.multiply.outer(per_trial, total)
    top = np.max(terms, axis=0)
    return top + np.log(np.sum(np.exp(terms - top), axis=0)) - math.log(_POINTS)


def _check_counts(hits: int, total: int) -> None:
    if total < 0 or not 0 <= hits <= max(total, 0):
        raise ValueError(f"need 0 <= hits <= total, got hits={hits}, total={total}")


def anytime_share_exceeds(hits: int, total: int, share: float, *, confidence: float) -> bool:
    """Whether `hits` of `total` show the true share is above `share`, at `confidence`
    simultaneously over every `total` (valid however often it is asked as data arrive)."""
    alpha = _alpha(confidence)
    _check_counts(hits, total)
    if share >= 1.0:
        return False
    if share <= 0.0:
        return hits > 0  # a share of 0 never produces a hit
    return bool(_log_mixture(np.array(hits), np.array(total), share) >= -math.log(alpha))


def anytime_proportion_lower_bound(hits: int, total: int, *, confidence: float) -> float:
    """Lower bound of the share behind `hits` of `total`, holding at `confidence` for every
    `total` at once: the smallest share that `anytime_share_exceeds` does not refute."""
    _alpha(confidence)
    _check_counts(hits, total)
    if hits == 0:
        return 0.0
    # M_n falls as the tested share rises and is < 1 at the observed share (each alternative
    # fits worse than the maximum likelihood), so the refuted shares are an interval (0, L).
    lo, hi = 0.0, hits / total
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if anytime_share_exceeds(hits, total, mid, confidence=confidence):
            lo = mid
        else:
            hi = mid
    return lo


def anytime_exceedance_thresholds(n_max: int, share: float, *, confidence: float) -> np.ndarray:
    """For n = 0..n_max, the fewest hits out of n with `anytime_share_exceeds` true
    (n + 1 where none is enough): the whole sequential rule as one table, O(1) per look."""
    alpha = _alpha(confidence)
    totals = np.arange(n_max + 1)
    if share >= 1.0:
        return totals + 1
    if share <= 0.0:
        return np.ones_like(totals)  # one hit refutes a share of 0
    # log M_n rises with hits (each alternative is above `share`): bisect every n at once.
    lo, hi = np.zeros_like(totals), totals + 1  # invariant: answer in (lo - 1, hi]
    target = -math.log(alpha)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        fires = (mid <= totals) & (_log_mixture(np.minimum(mid, totals), totals, share) >= target)
        hi = np.where(fires & (lo < hi), mid, hi)
        lo = np.where(~fires & (lo < hi), mid + 1, lo)
    return hi


def anytime_quantile_lower_bound(values: np.ndarray, q: float, *, confidence: float) -> float:
    """Lower bound of the q-quantile of (unsorted) samples, valid at every sample size at once:
    the h-th largest value, h the fewest exceedances that refute "share above it <= 1 - q"."""
    n = len(values)
    if n == 0:
        return -math.inf
    need = int(anytime_exceedance_thresholds(n, 1.0 - q, confidence=confidence)[n])
    if need > n:
        return -math.inf
    return float(np.partition(np.asarray(values), n - need)[n - need])
