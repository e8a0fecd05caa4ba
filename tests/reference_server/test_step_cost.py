"""The slo policy's step-time model and budget, with deterministic step costs (no clock, no torch):
a synthetic "hardware" turns each scheduled step's work into a duration, the scheduler's cost model
learns it, and the budgets it then plans must keep the true step time under the target."""

from __future__ import annotations

import math
import random

import pytest

from reference_server.step_cost import (
    FLOOR_INFORMATION,
    MIN_STEPS,
    NUM_FEATURES,
    StepCostModel,
    StepFeatures,
    step_features,
)
from tests.reference_server.scheduler_fakes import FakeEngineLoop

# Milliseconds: per step, per row, per prefill token, per context token, per attention unit.
TRUE_COST = (2.0, 0.05, 0.02, 0.0002, 1e-6)


def true_ms(f: StepFeatures) -> float:
    raw = (1, f.rows, f.prefill_tokens, f.context_tokens, f.prefill_attention)
    return sum(c * v for c, v in zip(TRUE_COST, raw, strict=True))


def _random_features(rng: random.Random) -> StepFeatures:
    rows = rng.randint(1, 64)
    prefill = rng.choice([0, 0, rng.randint(1, 1024)])
    start = rng.randint(0, 1024)
    context = rows * rng.randint(16, 512) + (start + prefill if prefill else 0)
    return StepFeatures(rows, prefill, context, prefill * (start + prefill))


def test_fit_converges_to_the_true_costs() -> None:
    rng = random.Random(0)
    model = StepCostModel()
    for _ in range(400):
        f = _random_features(rng)
        model.observe(f, true_ms(f))
    assert model.ready
    for fitted, true in zip(model.coefficients, TRUE_COST, strict=True):
        assert fitted == pytest.approx(true, rel=0.02, abs=1e-9)
    assert model.mean_abs_error_ms is not None and model.mean_abs_error_ms < 0.05


def test_not_ready_before_enough_steps_with_prefill() -> None:
    model = StepCostModel()
    decode_only = StepFeatures(8, 0, 800, 0)
    for _ in range(100):
        model.observe(decode_only, true_ms(decode_only))
    assert not model.ready  # the prefill cost was never seen: no budget from guesses
    prefill = StepFeatures(9, 256, 1056, 256 * 256)
    for _ in range(4):
        model.observe(prefill, true_ms(prefill))
    assert model.ready


def test_outliers_are_clipped_and_garbage_is_ignored() -> None:
    rng = random.Random(1)
    model = StepCostModel()
    for i in range(600):
        f = _random_features(rng)
        duration = true_ms(f)
        if i % 25 == 24:
            duration *= 100  # a GC pause or a stolen core
        model.observe(f, duration)
    model.observe(StepFeatures(4, 0, 400, 0), math.nan)
    model.observe(StepFeatures(4, 0, 400, 0), -3.0)
    # Within 25% of the truth on a typical mixed step despite a 100x outlier every 25 steps.
    probe = StepFeatures(32, 512, 32 * 300 + 512, 512 * 512)
    assert model.predict_ms(probe) == pytest.approx(true_ms(probe), rel=0.25)


def test_covariance_does_not_wind_up_on_steps_that_look_alike() -> None:
    rng = random.Random(3)
    model = StepCostModel()
    for _ in range(200):
        f = _random_features(rng)
        model.observe(f, true_ms(f))
    decode_only = StepFeatures(16, 0, 16 * 300, 0)
    for _ in range(5000):  # a long decode-only stretch: prefill directions unexcited
        model.observe(decode_only, true_ms(decode_only))
    assert model.covariance_trace <= NUM_FEATURES / FLOOR_INFORMATION  # the floor holds
    assert model.num_resets == 0  # what it learned of prefill is kept
    probe = StepFeatures(17, 512, 16 * 300 + 512, 512 * 512)
    before = model.predict_ms(probe)
    assert before == pytest.approx(true_ms(probe), rel=0.05)
    model.observe(probe, true_ms(probe) * 3)  # one slow prefill step (clipped, bounded gain)
    assert model.predict_ms(probe) < 2 * before


def test_a_non_finite_fit_starts_over() -> None:
    model = StepCostModel()
    for _ in range(40):
        model.observe(StepFeatures(1, 512, 512, 512 * 512), 10.0)
    huge = 10**200
    model.observe(StepFeatures(huge, huge, huge, huge), 10.0)  # x'Px overflows
    assert model.num_resets == 1 and not model.ready
    assert all(math.isfinite(c) for c in model.coefficients)
    model.observe(StepFeatures(4, 0, 400, 0), math.inf)  # ignored
    assert model.num_steps == 0


def test_budget_search_is_the_largest_that_fits() -> None:
    rng = random.Random(2)
    model = StepCostModel()
    for _ in range(300):
        f = _random_features(rng)
        model.observe(f, true_ms(f))
    tokens = model.max_prefill_tokens(
        target_ms=20.0, decode_rows=16, decode_context=4000, prefill_start=0, limit=2000
    )
    plan = model.planned_features
    assert model.predict_ms(plan(16, 4000, 0, tokens)) <= 20.0
    assert model.predict_ms(plan(16, 4000, 0, tokens + 1)) > 20.0
    assert model.max_prefill_tokens(
        target_ms=0.5, decode_rows=16, decode_context=4000, prefill_start=0, limit=2000
    ) == 0  # fmt: skip


def _run_slo(loop: FakeEngineLoop, steps: int, gap_ms: float = 0.0) -> list[tuple[float, int, int]]:
    """Step the fake engine, feeding the cost model the synthetic duration of each step (and the
    gap between steps): (true ms, budget planned, prefill tokens computed) per step."""
    history = []
    scheduler = loop.scheduler
    for _ in range(steps):
        if gap_ms:
            scheduler.cost_model.observe_gap(gap_ms)
        if not scheduler.has_unfinished():
            break
        out = scheduler.schedule(0.0)
        features = step_features(out.chunks)
        loop.apply(out)
        duration = true_ms(features)
        scheduler.cost_model.observe(features, duration)
        history.append((duration, scheduler.slo_token_budget or 0, features.prefill_tokens))
    return history


def _workload(loop: FakeEngineLoop, *, long_prompts: int = 6) -> None:
    for i in range(24):
        loop.add(f"d{i}", prompt_len=32, max_tokens=400)
    for i in range(long_prompts):
        loop.add(f"long{i}", prompt_len=1200, max_tokens=4)


def test_slo_budget_keeps_steps_under_the_target_and_prefill_moving() -> None:
    target = 6.0
    loop = FakeEngineLoop(
        num_blocks=4096, block_size=16, policy="slo", slo_target_ms=target,
        slo_min_prefill_tokens=16, max_num_batched_tokens=2048, max_prefill_chunk_tokens=2048,
    )  # fmt: skip
    _workload(loop)
    history = _run_slo(loop, 600)
    learned = [h for h in history[MIN_STEPS + 8 :] if h[2]]
    assert learned, "no prefill after the model was ready"
    worst = max(duration for duration, _, _ in learned)
    assert worst <= target * 1.05, worst
    # Every long prompt was served (bounded wait), not starved by the target.
    for i in range(6):
        assert loop.seqs[f"long{i}"].output_token_ids, f"long{i} never got its first token"


def test_the_gap_between_steps_counts_against_the_target() -> None:
    """The target is a time between tokens: step + the gap before the next step."""
    target, gap = 8.0, 2.0  # the same step target as the test above: 6 ms
    loop = FakeEngineLoop(
        num_blocks=4096, block_size=16, policy="slo", slo_target_ms=target,
        slo_min_prefill_tokens=16, max_num_batched_tokens=2048, max_prefill_chunk_tokens=2048,
    )  # fmt: skip
    _workload(loop)
    history = _run_slo(loop, 600, gap_ms=gap)
    learned = [h for h in history[MIN_STEPS + 8 :] if h[2]]
    assert learned
    assert max(duration for duration, _, _ in learned) + gap <= target * 1.05
    assert loop.scheduler.cost_model.gap_ms == pytest.approx(gap)
    # A stolen core's 100 ms gap once moves the estimate by a clipped amount only...
    loop.scheduler.cost_model.observe_gap(100.0)
    assert loop.scheduler.cost_model.gap_ms < 2 * gap
    # ...also when it is the very first gap measured.
    fresh = StepCostModel()
    for ms in (100.0, *[gap] * 7):
        fresh.observe_gap(ms)
    assert fresh.gap_ms == pytest.approx(gap)


def test_continuous_takes_the_whole_budget_on_the_same_workload() -> None:
    loop = FakeEngineLoop(
        num_blocks=4096, block_size=16, policy="continuous",
        max_num_batched_tokens=2048, max_prefill_chunk_tokens=2048,
    )  # fmt: skip
    _workload(loop)
    history = _run_slo(loop, 600)
    assert max(d for d, _, _ in history) > 6.0 * 2  # what the slo policy avoids


def test_decodes_over_the_target_still_give_prefill_its_floor() -> None:
    target = 0.5  # below even a decode-only step: the floor must still move prompts
    loop = FakeEngineLoop(
        num_blocks=4096, block_size=16, policy="slo", slo_target_ms=target,
        slo_min_prefill_tokens=64, max_num_batched_tokens=2048,
    )  # fmt: skip
    _workload(loop, long_prompts=2)
    history = _run_slo(loop, 400)
    ready = [h for h in history[MIN_STEPS + 8 :] if h[2]]
    assert ready and all(prefill >= 1 for _, _, prefill in ready)
    assert all(budget <= 26 + 64 for _, budget, _ in ready)  # decodes + the floor, no more
    for i in range(2):
        assert loop.seqs[f"long{i}"].output_token_ids


@pytest.mark.parametrize("target", [0.5, 6.0])
def test_a_long_prompt_waits_a_bounded_number_of_steps(target: float) -> None:
    """However tight the target, a prompt of P tokens that arrives among running decodes gets its
    first token within ceil(P / slo_min_prefill_tokens) steps (+1 for the sampling step)."""
    floor, prompt = 64, 1200
    loop = FakeEngineLoop(
        num_blocks=4096, block_size=16, policy="slo", slo_target_ms=target,
        slo_min_prefill_tokens=floor, max_num_batched_tokens=2048, max_prefill_chunk_tokens=2048,
    )  # fmt: skip
    for i in range(24):
        loop.add(f"d{i}", prompt_len=32, max_tokens=2000)
    _run_slo(loop, 200)  # decodes running, the model trained
    assert loop.scheduler.cost_model.ready
    long = loop.add("long", prompt_len=prompt, max_tokens=4)
    bound = math.ceil(prompt / floor) + 1
    for _ in range(bound):
        _run_slo(loop, 1)
        if long.output_token_ids:
            break
    assert long.output_token_ids, f"no first token after {bound} steps"
