"""Profile resolution: overrides from dicts and --set, with clear errors naming bad keys."""

from __future__ import annotations

import random

import pytest

from loadgen.errors import ConfigError
from loadgen.lengths import LengthDist
from loadgen.plan import build_plan
from loadgen.profiles import PROFILES, check_plans_requests, params_hash, resolve


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_resolves_at_every_scale(name: str) -> None:
    for scale in ("smoke", "quick", "full"):
        spec = resolve(name, {}, scale)
        assert spec.schedule.duration_seconds > 0
        assert spec.schedule.expected_count > 0


def test_unknown_key_error_names_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown profile parameter 'spike_rate'"):
        resolve("burst", {"spike_rate": 3}, "full")
    with pytest.raises(ConfigError, match="unknown length key"):
        resolve("steady", {"prompt_tokens": {"kind": "fixed", "valu": 3}}, "full")


def test_wrong_types_and_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="'max_concurrency' must be an integer"):
        resolve("steady", {"max_concurrency": 2.5}, "full")
    with pytest.raises(ConfigError, match="'stream' must be true/false"):
        resolve("steady", {"stream": "yes"}, "full")
    with pytest.raises(ConfigError, match="endpoint must be"):
        resolve("steady", {"endpoint": "embeddings"}, "full")
    with pytest.raises(ConfigError, match="unknown profile 'tsunami'"):
        resolve("tsunami", {}, "full")
    with pytest.raises(ConfigError, match="unknown scale"):
        resolve("steady", {}, "huge")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"long_share": None}, "'long_share' cannot be null"),
        ({"seed": None}, "'seed' cannot be null"),
        ({"main_seconds": None}, "'main_seconds' cannot be null"),
        ({"rate_rps": "abc"}, "'rate_rps' must be a number"),
        ({"rate_rps": True}, "'rate_rps' must be a number"),
        ({"duration_seconds": [1]}, "'duration_seconds' must be a number"),
        ({"dataset": 3}, "'dataset' must be a string"),
    ],
)
def test_null_and_wrong_types_for_any_parameter_are_config_errors(overrides, message) -> None:
    # Before, a null for a parameter with a value, or a non-number for one whose default is
    # null, got through to a TypeError or ValueError traceback.
    with pytest.raises(ConfigError, match=message):
        resolve("mixed_lengths", overrides, "full")


def test_the_parameters_whose_default_is_null_take_null_or_their_type() -> None:
    spec = resolve("steady", {"rate_rps": None, "duration_seconds": 30, "dataset": None}, "full")
    assert spec.params["rate_rps"] is None and spec.params["duration_seconds"] == 30.0
    assert resolve("steady", {"rate_rps": 5}, "full").params["rate_rps"] == 5.0


def test_dotted_override_reaches_into_length_distributions() -> None:
    spec = resolve("mixed_lengths", {"long_output_tokens.low": 300, "long_share": 0.5}, "full")
    long_class = next(c for c in spec.classes if c.length_class == "long")
    assert long_class.output_tokens.low == 300


def test_params_hash_changes_with_overrides() -> None:
    a = resolve("steady", {}, "full").params
    b = resolve("steady", {"seed": 1}, "full").params
    assert params_hash(a) != params_hash(b)
    assert params_hash(a) == params_hash(resolve("steady", {}, "full").params)


def test_mixed_lengths_tags_long_share_and_priority_mix_tags_batch() -> None:
    mixed = build_plan(resolve("mixed_lengths", {"long_share": 0.2, "rate_rps": 50}, "quick"))
    share = sum(r.length_class == "long" for r in mixed) / len(mixed)
    assert 0.15 < share < 0.25
    assert min(r.prompt_tokens for r in mixed if r.length_class == "long") >= 256
    prio = build_plan(resolve("priority_mix", {"rate_rps": 50}, "quick"))
    assert {r.priority for r in prio} == {"interactive", "batch"}


def test_workers_split_the_plan_without_loss_or_overlap() -> None:
    spec = resolve("steady", {"rate_rps": 40}, "smoke")
    whole = build_plan(spec)
    parts = [build_plan(spec, worker_index=i, worker_count=3) for i in range(3)]
    assert sorted(r.index for p in parts for r in p) == [r.index for r in whole]
    assert len(whole[0].prompt_text.encode()) == whole[0].prompt_tokens


def test_length_distributions_respect_clamps_and_centres() -> None:
    rng = random.Random(0)
    normal = LengthDist(kind="normal", mean=100, std=50, min=80, max=120)
    samples = [normal.sample(rng) for _ in range(2000)]
    assert min(samples) == 80 and max(samples) == 120
    logn = LengthDist(kind="lognormal", median=64, sigma=0.5, min=1, max=10_000)
    med = sorted(logn.sample(rng) for _ in range(2001))[1000]
    assert 58 <= med <= 70
    uni = [LengthDist(kind="uniform", low=3, high=5).sample(rng) for _ in range(300)]
    assert set(uni) == {3, 4, 5}
    with pytest.raises(ConfigError):
        LengthDist(kind="uniform", low=5, high=3)


def test_dataset_prompts_replace_synthetic_text(tmp_path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        '{"prompt": "hello there", "output_tokens": 7}\n'
        '{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hey!"}]}\n'
    )
    plan = build_plan(resolve("steady", {"dataset": str(data), "rate_rps": 20}, "smoke"))
    assert {r.prompt_text for r in plan} == {"hello there", "hi"}
    assert {r.max_tokens for r in plan if r.prompt_text == "hi"} == {4}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 1}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1"):
        build_plan(resolve("steady", {"dataset": str(bad)}, "smoke"))


def test_an_open_loop_plan_without_arrivals_is_refused_and_one_arrival_is_enough() -> None:
    # resolve() itself accepts it: `batchgate run` resolves placeholder rates before calibrating.
    spec = resolve("night_trickle", {"duration_seconds": 3}, "full")
    with pytest.raises(ConfigError, match=r"'night_trickle' plans no request: 0\.45 expected"):
        check_plans_requests(spec)
    for seed in range(50):  # 9 expected in 60 s: every seed plans some, and passes
        spec = resolve("night_trickle", {"duration_seconds": 60, "seed": seed}, "full")
        check_plans_requests(spec)
        assert build_plan(spec)
    # Closed loop plans no arrivals at all: users send back to back, nothing to refuse.
    check_plans_requests(
        resolve("night_trickle", {"duration_seconds": 3, "mode": "closed"}, "full")
    )
