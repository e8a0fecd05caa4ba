"""Profile values relative to the calibration resolve to the absolute numbers the load runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gate.calibration.content import CalibrationError, parse_calibration
from gate.orchestrator import relative as relative_module
from gate.orchestrator.relative import (
    RelativeError,
    mix_output_tokens,
    placeholders,
    relative_values,
)

CALIBRATION = {
    "unloaded": {"short": {"e2e": {"p50": 0.1}}},
    "capacity": {"short": {"output_tokens_per_second": 1200.0}},
}


def absolute_overrides(
    overrides: Mapping[str, Any],
    relative: Mapping[str, str],
    params: Mapping[str, Any],
    calibration: dict[str, Any],
) -> dict[str, Any]:
    """The function under test, given calibration.json's content as its one reader parses it."""
    parsed = parse_calibration(calibration)
    return relative_module.absolute_overrides(overrides, relative, params, parsed)


def test_relative_values_are_found_and_numbers_left_alone():
    overrides = {"base_rate_rps": "0.25x lone", "main_seconds": "400 requests", "users": 4}
    assert relative_values("p", overrides) == {
        "base_rate_rps": "0.25x lone",
        "main_seconds": "400 requests",
    }
    assert placeholders(overrides, relative_values("p", overrides)) == {
        "base_rate_rps": 1.0,
        "main_seconds": 1.0,
        "users": 4,
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("base_rate_rps", "fast"),
        ("base_rate_rps", "0.3x unloaded"),
        ("main_seconds", "0.3x capacity"),
        ("spike_rate_rps", "0x capacity"),
        ("main_seconds", "ten requests"),
    ],
)
def test_an_unreadable_relative_value_names_profile_and_key(key, value):
    with pytest.raises(RelativeError, match=rf"profiles\.burst\.{key}"):
        relative_values("burst", {key: value})


def test_lone_rate_is_a_multiple_of_one_lone_request_rate():
    out = absolute_overrides(
        {"base_rate_rps": 1.0}, {"base_rate_rps": "0.25x lone"}, {}, CALIBRATION
    )
    assert out["base_rate_rps"] == pytest.approx(0.25 / 0.1)


def test_capacity_rate_is_divided_by_the_mix_mean_output_tokens():
    params = {
        "output_tokens": {"kind": "uniform", "low": 8, "high": 16},
        "long_share": 0.5,
        "long_output_tokens": {"kind": "fixed", "value": 188},
    }
    assert mix_output_tokens(params) == pytest.approx(0.5 * 12 + 0.5 * 188)
    out = absolute_overrides(
        {"base_rate_rps": 1.0}, {"base_rate_rps": "0.5x capacity"}, params, CALIBRATION
    )
    assert out["base_rate_rps"] == pytest.approx(0.5 * 1200.0 / 100.0)


def test_request_counts_become_durations_at_the_stage_rate():
    relative = {
        "base_rate_rps": "0.25x lone",
        "spike_rate_rps": "1x capacity",
        "baseline_seconds": "100 requests",
        "spike_seconds": "60 requests",
        "recovery_seconds": "2x unloaded",
    }
    params = {"output_tokens": {"kind": "fixed", "value": 12}}
    out = absolute_overrides(placeholders(relative, relative), relative, params, CALIBRATION)
    assert out["baseline_seconds"] == pytest.approx(100 / 2.5)
    assert out["spike_seconds"] == pytest.approx(60 / 100.0)  # 1200 tok/s / 12 tok
    assert out["recovery_seconds"] == pytest.approx(0.2)


def test_a_missing_calibration_value_is_no_data_not_a_guess():
    missing = r"calibration has no unloaded\.short\.e2e\.p50"
    with pytest.raises(RelativeError, match=missing) as info:
        absolute_overrides({}, {"base_rate_rps": "1x lone"}, {}, {"unloaded": {}})
    assert int(info.value.exit_code) == 5


def test_a_kv_multiple_sends_enough_requests_to_hold_that_many_kv_tokens():
    calibration = {**CALIBRATION, "kv_capacity": {"tokens": 1000}}
    params = {
        "prompt_tokens": {"kind": "fixed", "value": 40},
        "output_tokens": {"kind": "fixed", "value": 10},
    }
    relative = {"spike_rate_rps": "1x capacity", "spike_seconds": "2x kv"}
    out = absolute_overrides(placeholders(relative, relative), relative, params, calibration)
    # 2 x 1000 tokens / 50 tokens per request = 40 requests at 1200/10 = 120 req/s
    assert out["spike_seconds"] == pytest.approx(40 / 120.0)


def test_a_kv_multiple_on_a_target_that_does_not_state_its_kv_capacity_stops_the_run():
    calibration = {**CALIBRATION, "kv_capacity": {"tokens": None, "source": "unknown"}}
    relative = {"spike_rate_rps": "1x capacity", "spike_seconds": "2x kv"}
    with pytest.raises(RelativeError, match="kv_capacity") as info:
        absolute_overrides(placeholders(relative, relative), relative, {}, calibration)
    assert int(info.value.exit_code) == 5


def _client(phase: str) -> dict:
    """A calibration whose `phase` (lone or capacity) had a saturated client."""
    invalid = {"measurement_valid": False, "reasons": ["client CPU peaked at 0.97 of a core"]}
    valid = {"measurement_valid": True, "reasons": []}
    return {**CALIBRATION, "client": {"lone": valid, "capacity": valid, phase: invalid}}


def test_a_rate_sized_by_an_invalid_capacity_phase_stops_the_run_with_its_reason():
    # A saturated client measured itself: sized by it, a "1.5x capacity" spike would under-load
    # the target and its gates pass on load it never saw.
    relative = {"spike_rate_rps": "1.5x capacity"}
    with pytest.raises(RelativeError, match=r"capacity phase.*0\.97 of a core") as info:
        absolute_overrides({}, relative, {}, _client("capacity"))
    assert int(info.value.exit_code) == 5
    # The lone phase stands on its own: a lone-relative rate still resolves.
    out = absolute_overrides({}, {"base_rate_rps": "0.25x lone"}, {}, _client("capacity"))
    assert out["base_rate_rps"] == pytest.approx(2.5)


@pytest.mark.parametrize(
    "relative", [{"base_rate_rps": "0.25x lone"}, {"spike_seconds": "2x unloaded"}]
)
def test_a_value_sized_by_an_invalid_lone_phase_stops_the_run(relative):
    with pytest.raises(RelativeError, match="lone phase was not a valid measurement") as info:
        absolute_overrides({}, relative, {}, _client("lone"))
    assert int(info.value.exit_code) == 5
    out = absolute_overrides({}, {"spike_rate_rps": "1x capacity"}, {}, _client("lone"))
    assert out["spike_rate_rps"] == pytest.approx(1200.0 / mix_output_tokens({}))


def test_kv_values_and_request_counts_need_only_the_phases_they_use():
    # Both client phases invalid: a KV multiple is the server's own word and still resolves
    # where its rate is a plain number; a count at a capacity-relative rate does not.
    calibration = {**_client("capacity"), "kv_capacity": {"tokens": 1000}}
    calibration["client"] = {**calibration["client"], "lone": calibration["client"]["capacity"]}
    params = {
        "prompt_tokens": {"kind": "fixed", "value": 40},
        "output_tokens": {"kind": "fixed", "value": 10},
    }
    out = absolute_overrides(
        {"spike_rate_rps": 20.0}, {"spike_seconds": "2x kv"}, params, calibration
    )
    assert out["spike_seconds"] == pytest.approx(40 / 20.0)
    relative = {"spike_rate_rps": "1x capacity", "spike_seconds": "60 requests"}
    with pytest.raises(
        RelativeError, match=r"spike_rate_rps '1x capacity': the calibration's capacity"
    ):
        absolute_overrides(placeholders(relative, relative), relative, params, calibration)


@pytest.mark.parametrize("client", [["lone"], "valid", {"capacity": "yes"}, {"capacity": []}])
def test_a_malformed_client_section_is_named_not_a_traceback(client):
    # Refused by the reader, field by field, before any value is resolved.
    with pytest.raises(CalibrationError, match=r"calibration\.json: client") as info:
        absolute_overrides(
            {}, {"base_rate_rps": "1x capacity"}, {}, {**CALIBRATION, "client": client}
        )
    assert int(info.value.exit_code) == 5


def test_a_relative_time_scale_becomes_the_output_token_rate_it_asks_for():
    overrides = {"time_scale": "0.1x capacity", "length_scale": 0.03125}
    relative = relative_values("trace", overrides)
    assert relative == {"time_scale": "0.1x capacity"}
    assert placeholders(overrides, relative)["time_scale"] == 1.0
    resolved = absolute_overrides(overrides, relative, {}, CALIBRATION)
    assert resolved["time_scale"] == {"output_tokens_per_second": pytest.approx(120.0)}
    for bad in ("0.1x lone", "fast", "0x capacity"):
        with pytest.raises(RelativeError, match=r"time_scale|positive"):
            relative_values("trace", {"time_scale": bad})
