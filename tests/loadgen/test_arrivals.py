"""Arrival processes: rates, burstiness and determinism, in-process without sleeping."""

from __future__ import annotations

import itertools
import statistics

import pytest

from loadgen.arrivals import ArrivalProcess, generate_arrivals
from loadgen.errors import ConfigError
from loadgen.shapes import RateSchedule, RateStage


def _steady(rate: float, seconds: float) -> RateSchedule:
    return RateSchedule((RateStage(name="main", duration_seconds=seconds, rate_rps=rate),))


def test_poisson_achieved_rate_within_5_percent_over_thousands_of_arrivals() -> None:
    for seed in range(5):
        arrivals = generate_arrivals(
            ArrivalProcess(kind="poisson"), _steady(50.0, 100.0), seed=seed
        )
        assert len(arrivals) > 4000
        assert abs(len(arrivals) / 100.0 - 50.0) / 50.0 < 0.05


def test_poisson_gaps_are_exponential_with_unit_coefficient_of_variation() -> None:
    times = [t for t, _ in generate_arrivals(ArrivalProcess(), _steady(100.0, 50.0), seed=3)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.93 < cv < 1.07


def test_gamma_shape_below_one_is_burstier_than_poisson() -> None:
    times = [
        t
        for t, _ in generate_arrivals(
            ArrivalProcess(kind="gamma", gamma_shape=0.25), _steady(100.0, 50.0), seed=1
        )
    ]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) > 1.6
    assert abs(len(times) / 50.0 - 100.0) / 100.0 < 0.1


def test_constant_arrivals_are_evenly_spaced_at_the_rate() -> None:
    arrivals = generate_arrivals(ArrivalProcess(kind="constant"), _steady(4.0, 2.0), seed=0)
    assert [round(t, 9) for t, _ in arrivals] == [
        0.125,
        0.375,
        0.625,
        0.875,
        1.125,
        1.375,
        1.625,
        1.875,
    ]


def test_linear_ramp_places_arrivals_by_the_integrated_rate() -> None:
    ramp = RateSchedule(
        (RateStage(name="main", duration_seconds=100.0, rate_rps=0.0, end_rate_rps=100.0),)
    )
    times = [t for t, _ in generate_arrivals(ArrivalProcess(kind="constant"), ramp, seed=0)]
    assert len(times) == 5000  # integral of the rate: 100 * 100 / 2
    first_half = sum(1 for t in times if t < 50.0)
    assert first_half == 1250  # a quarter of the area lies under the first half of a ramp


def test_stages_tag_arrivals_and_same_seed_gives_same_plan() -> None:
    schedule = RateSchedule(
        (
            RateStage(name="baseline", duration_seconds=10.0, rate_rps=2.0),
            RateStage(name="spike", duration_seconds=5.0, rate_rps=40.0),
            RateStage(name="recovery", duration_seconds=10.0, rate_rps=2.0),
        )
    )
    a = generate_arrivals(ArrivalProcess(), schedule, seed=7)
    assert a == generate_arrivals(ArrivalProcess(), schedule, seed=7)
    assert a != generate_arrivals(ArrivalProcess(), schedule, seed=8)
    for t, stage in a:
        expected = "baseline" if t < 10 else "spike" if t < 15 else "recovery"
        assert stage == expected
    assert sum(1 for _, s in a if s == "spike") > 5 * sum(1 for _, s in a if s == "baseline")


def test_unknown_arrival_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="arrival kind 'bursty'"):
        ArrivalProcess(kind="bursty")
