"""The sequential (anytime-valid) share test of gate.sequential, as `abort_on_fail` uses it:
looked at after every new sample, it must abort a run whose true p99 sits exactly at the
threshold in at most 5 % of runs, where the one-shot rule re-applied is wrong ~20 % of the time,
and still stop a clearly bad run early. Seeded simulation: deterministic and fast."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.sequential import (
    anytime_exceedance_thresholds,
    anytime_proportion_lower_bound,
    anytime_quantile_lower_bound,
    anytime_share_exceeds,
)
from gate.stats import binom_cdf, proportion_bounds

LIMIT = 0.01  # a p99 gate: the allowed exceedance share
CONFIDENCE = 0.95


def _first_abort(share: float, n_max: int, looks: np.ndarray, thresholds: np.ndarray, seed: int):
    """Sample size at the first look that aborts, per simulated run (inf: never)."""
    rng = np.random.default_rng(seed)
    runs = 1000
    hits = np.cumsum(rng.random((runs, n_max)) < share, axis=1, dtype=np.int32)[:, looks - 1]
    fired = hits >= thresholds[looks][None, :]
    return np.where(fired.any(axis=1), looks[fired.argmax(axis=1)], np.inf)


def test_looking_after_every_sample_up_to_2400_aborts_at_most_5_percent_at_the_limit():
    thresholds = anytime_exceedance_thresholds(2400, LIMIT, confidence=CONFIDENCE)
    looks = np.arange(1, 2401)
    aborted = _first_abort(LIMIT, 2400, looks, thresholds, seed=1)
    assert np.mean(np.isfinite(aborted)) <= 0.05  # measured: 0.026 (2000 runs: 0.025)


def test_looking_every_20_samples_up_to_10000_aborts_at_most_5_percent_at_the_limit():
    thresholds = anytime_exceedance_thresholds(10_000, LIMIT, confidence=CONFIDENCE)
    looks = np.arange(20, 10_001, 20)
    aborted = _first_abort(LIMIT, 10_000, looks, thresholds, seed=2)
    assert np.mean(np.isfinite(aborted)) <= 0.05  # measured: 0.018


def test_the_one_shot_rule_repeated_aborts_far_more_often():
    # Why the sequential rule exists: Clopper-Pearson's lower bound checked every 20 samples.
    looks = np.arange(20, 2401, 20)
    thresholds = np.full(2401, 10**9)
    k = 1
    for n in looks:  # fewest hits with P(Bin(n, LIMIT) >= k) < alpha, i.e. CP lower bound > LIMIT
        while 1.0 - binom_cdf(k - 1, int(n), LIMIT) >= 1 - CONFIDENCE:
            k += 1
        thresholds[n] = k
        assert proportion_bounds(k, int(n), confidence=CONFIDENCE).lower > LIMIT
        assert proportion_bounds(k - 1, int(n), confidence=CONFIDENCE).lower <= LIMIT
    aborted = _first_abort(LIMIT, 2400, looks, thresholds, seed=1)
    assert np.mean(np.isfinite(aborted)) > 0.15  # measured: 0.21 (0.29 up to 10,000)


@pytest.mark.parametrize("factor, within", [(5, 150), (10, 50), (2, 1500)])
def test_a_clearly_bad_p99_is_caught_early(factor, within):
    thresholds = anytime_exceedance_thresholds(2400, LIMIT, confidence=CONFIDENCE)
    looks = np.arange(1, 2401)
    aborted = _first_abort(factor * LIMIT, 2400, looks, thresholds, seed=3 + factor)
    # measured medians: 5x -> 77 samples, 10x -> 24, 2x -> ~930 (checking every sample)
    assert np.median(aborted) <= within
    assert np.mean(np.isfinite(aborted)) >= 0.95 if factor >= 5 else True


def test_the_threshold_table_is_the_scalar_rule():
    thresholds = anytime_exceedance_thresholds(3000, LIMIT, confidence=CONFIDENCE)
    assert thresholds[0] == 1  # nothing out of nothing is never enough
    for n in (1, 2, 7, 50, 100, 299, 1000, 2999, 3000):
        k = int(thresholds[n])
        assert k > n or anytime_share_exceeds(k, n, LIMIT, confidence=CONFIDENCE)
        assert k == 0 or not anytime_share_exceeds(k - 1, n, LIMIT, confidence=CONFIDENCE)
    assert np.all(np.diff(thresholds) >= 0)
    # more cautious than the one-shot rule at every n
    for n in (100, 300, 1000, 3000):
        k = int(thresholds[n])
        assert proportion_bounds(k, n, confidence=CONFIDENCE).lower > LIMIT


def test_lower_bound_inverts_the_test_and_is_below_the_one_shot_bound():
    # one hit of one refutes no share: the mixture's mean odds ratio (~9.6) is short of 1/alpha
    assert anytime_proportion_lower_bound(1, 1, confidence=CONFIDENCE) == 0.0
    for hits, total in ((2, 2), (3, 40), (8, 100), (30, 1000), (100, 100), (500, 1000)):
        bound = anytime_proportion_lower_bound(hits, total, confidence=CONFIDENCE)
        assert 0.0 < bound <= hits / total
        assert bound <= proportion_bounds(hits, total, confidence=CONFIDENCE).lower
        assert anytime_share_exceeds(hits, total, bound * 0.999, confidence=CONFIDENCE)
        assert not anytime_share_exceeds(hits, total, bound * 1.001, confidence=CONFIDENCE)
    assert anytime_proportion_lower_bound(0, 50, confidence=CONFIDENCE) == 0.0
    assert anytime_proportion_lower_bound(8, 100, confidence=CONFIDENCE) > LIMIT
    assert anytime_proportion_lower_bound(8, 100, confidence=0.99) < anytime_proportion_lower_bound(
        8, 100, confidence=CONFIDENCE
    )


def test_edges_of_the_share_test():
    assert not anytime_share_exceeds(10, 10, 1.0, confidence=CONFIDENCE)
    assert anytime_share_exceeds(1, 10, 0.0, confidence=CONFIDENCE)
    assert not anytime_share_exceeds(0, 10, 0.0, confidence=CONFIDENCE)
    assert not anytime_share_exceeds(0, 0, LIMIT, confidence=CONFIDENCE)
    never = anytime_exceedance_thresholds(5, 1.0, confidence=CONFIDENCE)
    assert never.tolist() == [1, 2, 3, 4, 5, 6]
    assert anytime_exceedance_thresholds(3, 0.0, confidence=CONFIDENCE).tolist() == [1, 1, 1, 1]
    for hits, total in ((-1, 5), (6, 5), (1, -1)):
        with pytest.raises(ValueError, match="hits"):
            anytime_share_exceeds(hits, total, LIMIT, confidence=CONFIDENCE)
        with pytest.raises(ValueError, match="hits"):
            anytime_proportion_lower_bound(hits, total, confidence=CONFIDENCE)
    for bad in (0.3, 1.0):
        with pytest.raises(ValueError, match="confidence"):
            anytime_share_exceeds(1, 5, LIMIT, confidence=bad)
        with pytest.raises(ValueError, match="confidence"):
            anytime_proportion_lower_bound(1, 5, confidence=bad)
        with pytest.raises(ValueError, match="confidence"):
            anytime_exceedance_thresholds(5, LIMIT, confidence=bad)


def test_high_limits_keep_their_power():
    # A p50 gate: odds grid 1.5x..25.6x of 1 stays below a share of 1.
    assert anytime_share_exceeds(90, 100, 0.5, confidence=CONFIDENCE)
    assert not anytime_share_exceeds(55, 100, 0.5, confidence=CONFIDENCE)
    assert anytime_proportion_lower_bound(100, 100, confidence=CONFIDENCE) > 0.9


def test_quantile_form():
    assert anytime_quantile_lower_bound(np.array([]), 0.99, confidence=CONFIDENCE) == -math.inf
    values = np.arange(1.0, 1001.0)[::-1].copy()  # 1..1000
    need = int(anytime_exceedance_thresholds(1000, 0.01, confidence=CONFIDENCE)[1000])
    bound = anytime_quantile_lower_bound(values, 0.99, confidence=CONFIDENCE)
    assert bound == 1001.0 - need  # the need-th largest value
    # a "p99 < X" gate fails on the quantile form exactly when it fails on the share form
    for x in (bound - 0.5, bound + 0.5):
        hits = int(np.count_nonzero(values > x))
        assert anytime_share_exceeds(hits, 1000, 0.01, confidence=CONFIDENCE) == (x < bound)
    assert anytime_quantile_lower_bound(np.array([1.0]), 0.99, confidence=CONFIDENCE) == -math.inf
    # two exceedances out of five already refute a share of 1 % (P ~ 1e-3): the 2nd largest
    assert anytime_quantile_lower_bound(np.arange(5.0), 0.99, confidence=CONFIDENCE) == 3.0
    # coverage: the bound stays below the true p99 at every n at once in >= 95 % of runs
    rng = np.random.default_rng(12)
    truth = -math.log(0.01)
    need = anytime_exceedance_thresholds(2000, 0.01, confidence=CONFIDENCE)
    wrong = 0
    for _ in range(200):
        values = rng.exponential(1.0, 2000)
        for n in range(100, 2001, 100):  # the bound at n: the need[n]-th largest of n values
            if need[n] <= n and np.partition(values[:n], n - need[n])[n - need[n]] > truth:
                wrong += 1
                break
    assert wrong / 200 <= 0.05
    assert anytime_quantile_lower_bound(values, 0.99, confidence=CONFIDENCE) == float(
        np.partition(values, 2000 - need[2000])[2000 - need[2000]]
    )
