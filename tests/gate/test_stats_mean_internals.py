"""gate.stats's mean bounds below their results: the bootstrap-t against a plain
reimplementation, constant resamples, the sample size where the bootstrap gives way to Hall's
form, Hall's correction with almost no skew, and inputs that are not float64 (the other
internals: tests/gate/test_stats_internals.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from gate import stats
from gate.stats import (
    bounded_mean_bounds,
    mean_bounds,
)

# --- mean bounds ---------------------------------------------------------------------------


def _bootstrap_t(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """The studentized bootstrap, written plainly: 999 seeded resamples, T* sorted in full."""
    n = len(x)
    mean, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    index = np.random.default_rng(0x5EED + n).integers(0, n, (999, n), dtype=np.int32)
    resampled = x[index]
    shift = resampled.mean(axis=1) - mean
    spread = resampled.std(axis=1, ddof=1) / math.sqrt(n)
    pivots = []
    for s, d in zip(shift, spread, strict=True):
        if d > 1e-12 * max(1.0, abs(mean)):
            pivots.append(s / d)
        else:  # a constant resample: on the mean 0, else infinite on its side
            pivots.append(
                0.0 if abs(s) <= 1e-12 * max(1.0, abs(mean)) else math.copysign(math.inf, s)
            )
    pivots.sort()
    rank = math.floor(alpha * 1000)
    return mean - pivots[999 - rank] * se, mean - pivots[rank - 1] * se


@pytest.mark.parametrize(
    "x",
    [
        np.array([-1.5, 0.25, 2.0, -0.5, 3.0, 1.0, -2.0, 0.75, 0.5]),
        np.random.default_rng(5).normal(size=51),
        np.random.default_rng(6).standard_t(3, size=200),
    ],
)
@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95])
def test_the_bootstrap_t_is_the_plain_one(x: np.ndarray, confidence: float) -> None:
    lower, upper = stats._studentized_bounds(
        x, float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(len(x)), 1.0 - confidence
    )
    want_lower, want_upper = _bootstrap_t(x, 1.0 - confidence)
    assert lower == pytest.approx(want_lower, rel=1e-9, abs=1e-12)
    assert upper == pytest.approx(want_upper, rel=1e-9, abs=1e-12)


def test_resamples_constant_on_the_mean_have_a_pivot_of_zero() -> None:
    # 18 of 20 values on the mean: ~12 % of the resamples are constant there, enough that the
    # 40 % points of T* are 0 and both bounds are the mean itself.
    x = np.array([0.0] * 18 + [-1.0, 1.0])
    b = mean_bounds(x, confidence=0.6)
    assert (b.lower, b.upper) == (0.0, 0.0)
    assert _bootstrap_t(x, 0.4) == (0.0, 0.0)


def test_the_bootstrap_serves_up_to_1000_samples() -> None:
    # At 0.9995 the bootstrap's 999 resamples cannot resolve alpha (no bound); Hall's analytic
    # form, used above 1000 samples, can.
    x = np.random.default_rng(8).normal(size=1001)
    at_1000 = mean_bounds(x[:1000], confidence=0.9995)
    assert (at_1000.lower, at_1000.upper) == (-math.inf, math.inf)
    at_1001 = mean_bounds(x, confidence=0.9995)
    assert math.isfinite(at_1001.lower) and math.isfinite(at_1001.upper)


def _hall(x: np.ndarray, alpha: float) -> tuple[float, float]:
    n = len(x)
    mean, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    centred = x - mean
    skew = float(np.mean(centred**3)) / float(np.mean(centred**2)) ** 1.5
    a, b = skew / (3.0 * math.sqrt(n)), skew / (6.0 * math.sqrt(n))
    z = stats.NormalDist().inv_cdf(1.0 - alpha)
    if abs(a) < 1e-12:
        return mean - (z - b) * se, mean - (-z - b) * se
    t = [
        (math.copysign(abs(v) ** (1 / 3), v) - 1.0) / a
        for v in (1 + 3 * a * (w - b) for w in (z, -z))
    ]
    return mean - t[0] * se, mean - t[1] * se


def test_halls_correction_with_almost_no_skew_shifts_by_b() -> None:
    # Symmetric data, one value nudged: |a| below 1e-12, so t(z) = z - b, with b large enough
    # (~1e-13) to move the bound's last digits.
    half = np.random.default_rng(9).normal(size=600)
    x = np.concatenate([half, -half, [0.0]])
    x[0] += 1e-9
    n = len(x)
    centred = x - np.mean(x)
    skew = float(np.mean(centred**3)) / float(np.mean(centred**2)) ** 1.5
    assert 1e-15 < abs(skew / (3 * math.sqrt(n))) < 1e-12
    lower, upper = stats._studentized_bounds(
        x, float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n), 0.05
    )
    assert (lower, upper) == _hall(x, 0.05)
    mean, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    b = skew / (6 * math.sqrt(n))
    z = stats.NormalDist().inv_cdf(0.95)
    assert (lower, upper) != (mean - (z + b) * se, mean - (-z + b) * se)


def test_two_samples_have_bounds() -> None:
    b = mean_bounds(np.array([1.0, 3.0]), confidence=0.6)
    assert math.isfinite(b.lower) and math.isfinite(b.upper) and b.lower <= 2.0 <= b.upper


def test_a_zero_among_the_values_leaves_the_lognormal_pivot_out_without_a_warning() -> None:
    x = np.array([0.0, 1.0, 2.0, 4.0, 3.0, 2.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = mean_bounds(x, confidence=0.9)
    assert (b.lower, b.upper) == stats._studentized_bounds(
        x, float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(6), 1.0 - 0.9
    )


def test_single_precision_input_is_computed_in_double() -> None:
    x32 = np.random.default_rng(10).lognormal(size=40).astype(np.float32)
    assert mean_bounds(x32, confidence=0.9) == mean_bounds(x32.astype(np.float64), confidence=0.9)
    u32 = np.random.default_rng(12).uniform(0.1, 0.9, size=40).astype(np.float32)
    assert bounded_mean_bounds(u32, low=0.0, high=1.0, confidence=0.9) == bounded_mean_bounds(
        u32.astype(np.float64), low=0.0, high=1.0, confidence=0.9
    )


def test_bounded_mean_bounds_carry_their_confidence() -> None:
    for x in (np.array([]), np.array([0.5]), np.array([0.0, 1.0, 1.0]), np.array([0.2, 0.4])):
        assert bounded_mean_bounds(x, low=0.0, high=1.0, confidence=0.8).confidence == 0.8
