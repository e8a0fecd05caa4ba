"""Profile shapes: rates and stages from `tick()` at chosen times, without sleeping."""

from __future__ import annotations

import pytest

from loadgen.profiles import resolve


def test_burst_tick_walks_baseline_spike_recovery_then_ends() -> None:
    schedule = resolve("burst", {}, "full").schedule
    assert schedule.tick(0.0).stage == "baseline"
    assert schedule.tick(19.9).rate_rps == 2.0
    spike = schedule.tick(20.0)
    assert (spike.stage, spike.rate_rps) == ("spike", 20.0)
    assert schedule.tick(29.99).stage == "spike"
    assert schedule.tick(30.0).stage == "recovery"
    assert schedule.tick(59.99).rate_rps == 2.0
    assert schedule.tick(60.0) is None


def test_ramp_tick_rises_linearly() -> None:
    schedule = resolve("ramp", {"start_rate_rps": 2.0, "end_rate_rps": 12.0}, "full").schedule
    assert schedule.tick(0.0).rate_rps == pytest.approx(2.0)
    assert schedule.tick(60.0).rate_rps == pytest.approx(7.0)
    assert schedule.tick(119.999).rate_rps == pytest.approx(12.0, abs=1e-3)
    assert schedule.mean_rate_rps == pytest.approx(7.0)


def test_night_trickle_gaps_exceed_common_keepalive_timeouts() -> None:
    spec = resolve("night_trickle", {}, "full")
    assert 1.0 / spec.schedule.tick(10.0).rate_rps > 5.0  # uvicorn's default keep-alive is 5 s
    assert spec.arrival.kind == "poisson"


def test_scales_shrink_durations_but_keep_rates() -> None:
    full = resolve("burst", {}, "full").schedule
    smoke = resolve("burst", {}, "smoke").schedule
    assert smoke.duration_seconds == pytest.approx(full.duration_seconds * 0.05)
    assert [s.rate_rps for s in smoke.stages] == [s.rate_rps for s in full.stages]
    assert smoke.tick(smoke.duration_seconds * 0.4).stage == "spike"


def test_duration_and_rate_overrides_keep_stage_proportions() -> None:
    schedule = resolve("burst", {"duration_seconds": 6, "rate_rps": 10}, "smoke").schedule
    assert schedule.duration_seconds == pytest.approx(6.0)
    assert schedule.mean_rate_rps == pytest.approx(10.0)
    assert schedule.tick(2.5).rate_rps == pytest.approx(10 * schedule.tick(0.5).rate_rps)
