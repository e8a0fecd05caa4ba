"""Monitor gates (and `batchgate tune`'s objective) report an interval without a threshold; it
covers the truth at the stated confidence (simulated truth, 2,000 trials each)."""

from __future__ import annotations

import numpy as np
import pytest

from gate.metrics.measurements import Events, NoData, Samples
from gate.verdicts.assess import monitor_interval

TRIALS = 2000


def _coverage(draw, truth, statistic) -> float:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(TRIALS):
        lo, hi = monitor_interval(draw(rng), statistic, 0.95)
        hits += lo <= truth <= hi
    return hits / TRIALS


def test_percentile_interval_covers_the_true_quantile() -> None:
    truth = float(np.exp(1.0 * 1.2815515655446004))  # lognormal sigma 1: true p90
    cover = _coverage(lambda r: Samples(values=r.lognormal(0, 1, 200)), truth, "p90")
    assert cover >= 0.94


def test_share_interval_covers_the_true_share() -> None:
    def draw(r):
        return Events(hits=int(r.binomial(150, 0.3)), total=150, window_seconds=10.0)

    assert _coverage(draw, 0.3, "mean") >= 0.94


@pytest.mark.parametrize("tokens_per_request", [1, 12])
def test_rate_interval_covers_the_true_rate(tokens_per_request: int) -> None:
    rate, seconds = 8.0, 20.0  # requests/s: Poisson arrivals in a 20 s window

    def draw(r):
        n = int(r.poisson(rate * seconds))
        return Events(hits=n * tokens_per_request, total=max(n, 1), window_seconds=seconds)

    assert _coverage(draw, rate * tokens_per_request, "rate") >= 0.93


def test_no_interval_where_none_applies() -> None:
    assert monitor_interval(NoData(reason="x"), "p50", 0.95) is None
    assert monitor_interval(Samples(values=np.array([])), "p50", 0.95) is None
    assert monitor_interval(Samples(values=np.array([1.0, 2.0])), "max", 0.95) is None
