"""target_verdict.py: a benchmark target is "met" or "not met" only when the quantile's 95 %
bound on the deciding side clears it, and "undecided" otherwise or with too few samples; the
JSON form keeps every figure and never carries an infinity."""

from __future__ import annotations

import json

import pytest

from benchmarks.target_verdict import judge


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        ([0.95, 0.96, 0.97, 0.93, 0.99, 0.92, 0.94], "met"),  # every bound above 0.90
        ([0.80, 0.82, 0.84, 0.86, 0.88], "not met"),  # every bound below
        ([0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92], "undecided"),  # 0.90 inside the bounds
        # A median above the target is not enough: its lower bound (the smallest of five) is not.
        ([0.70, 0.91, 0.92, 0.93, 0.94], "undecided"),
        ([0.95, 0.96, 0.97], "undecided"),  # three rounds: the median has no 95 % bounds
    ],
)
def test_a_floor_is_judged_on_the_bounds_of_the_median(ratios: list[float], verdict: str) -> None:
    result = judge(ratios, 0.5, 0.90, at_least=True)
    assert result.verdict == verdict
    assert result.samples == len(ratios)
    assert result.lower <= result.value <= result.upper


def test_a_ceiling_needs_its_upper_bound_under_the_target() -> None:
    fast = [0.001 * (1 + i % 7) for i in range(600)]  # 1-7 ms
    assert judge(fast, 0.99, 0.010, at_least=False).verdict == "met"
    slow = [0.011 + 0.001 * (i % 7) for i in range(600)]  # 11-17 ms
    assert judge(slow, 0.99, 0.010, at_least=False).verdict == "not met"
    # 298 probes: a p99 has no 95 % upper bound yet, however fast they all were.
    few = judge(fast[:298], 0.99, 0.010, at_least=False)
    assert (few.verdict, few.upper) == ("undecided", float("inf"))
    assert few.cell(1e3, 2).endswith("?] undecided")


def test_the_cell_and_the_json_say_the_same() -> None:
    result = judge([0.80, 0.82, 0.84, 0.86, 0.88], 0.5, 0.90, at_least=True)
    assert result.cell() == "0.840 [0.80, 0.88] not met"
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data == {"value": 0.84, "lower": 0.80, "upper": 0.88, "target": 0.90,
                    "at_least": True, "samples": 5, "verdict": "not met"}  # fmt: skip


def test_no_samples_is_undecided_not_a_crash() -> None:
    result = judge([], 0.99, 0.010, at_least=False)
    assert result.verdict == "undecided"
    assert result.cell() == "no samples"
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False))["value"] is None
