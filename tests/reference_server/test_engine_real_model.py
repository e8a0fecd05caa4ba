"""The engine over the real (tiny, CPU) ModelRunner: a request's tokens do not depend on what
else is in the batch, on being preempted and recomputed, nor on prefix caching."""

from __future__ import annotations

import pytest

from reference_server import BatchingConfig, Engine, EngineConfig, SamplingParams
from tests.reference_server.fakes import run_to_completion

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # builds the tiny model and runs ~150 real steps

BLOCK_SIZE = 4
TINY_BLOCK_BYTES = 2 * 2 * 2 * 32 * BLOCK_SIZE * 4  # k+v, layers, kv heads, head dim, fp32
PROMPT = [ord(c) for c in "The quick brown fox"]


@pytest.fixture(scope="module")
def runners():
    """One runner per KV pool size, shared by the engines of this module (building is slow)."""
    from reference_server.model_runner import ModelRunner

    built = {}

    def get(num_kv_blocks: int):
        if num_kv_blocks not in built:
            built[num_kv_blocks] = ModelRunner(
                model="tiny",
                device="cpu",
                seed=0,
                block_size=BLOCK_SIZE,
                kv_cache_memory_bytes=num_kv_blocks * TINY_BLOCK_BYTES,
                max_model_len=256,
            )
        return built[num_kv_blocks]

    return get


def _engine(runners, num_kv_blocks: int = 512, **batching) -> Engine:
    config = EngineConfig(
        model="tiny",
        device="cpu",
        seed=0,
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=num_kv_blocks * TINY_BLOCK_BYTES,
        watermark_ratio=0.0,
        max_model_len=256,
        batching=BatchingConfig.from_dict(batching),
    )
    engine = Engine(config, runner=runners(num_kv_blocks))
    assert engine.block_manager.num_blocks == num_kv_blocks
    return engine


def _run(engine: Engine, target: SamplingParams, *, others: int, priority: str = "interactive"):
    for i in range(others):
        engine.add_request(
            f"o{i}",
            [ord(c) for c in f"other prompt number {i} " * (1 + i % 2)],
            SamplingParams(max_tokens=8 + i, temperature=0.9, top_p=0.9, seed=100 + i),
        )
    engine.add_request("x", PROMPT, target, priority=priority)
    results, _ = run_to_completion(engine)
    return results["x"][0], engine.stats()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=10, temperature=0.0),
        SamplingParams(max_tokens=10, temperature=0.8, top_k=40, seed=1234),
    ],
    ids=["greedy", "seeded"],
)
@pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])
def test_tokens_are_the_same_alone_in_a_busy_batch_and_after_recompute(runners, params, caching):
    # The other prompts share "other prompt number ": with caching on they share blocks, and a
    # re-admitted victim may find its own.
    alone, _ = _run(_engine(runners, enable_prefix_caching=caching), params, others=0)
    assert len(alone) == 10
    busy, _ = _run(
        _engine(runners, max_prefill_chunk_tokens=8, enable_prefix_caching=caching),
        params,
        others=3,
    )
    assert busy == alone
    # 16 blocks cannot hold four growing requests: the batch-class "x" is preempted.
    squeezed, stats = _run(
        _engine(
            runners, num_kv_blocks=16, max_prefill_chunk_tokens=4, enable_prefix_caching=caching
        ),
        params,
        others=3,
        priority="batch",
    )
    assert stats.num_preemptions_total > 0 and stats.num_recomputed_tokens_total > 0
    assert squeezed == alone
    assert stats.num_kv_blocks_used == 0


def _all_outputs(engine: Engine) -> dict[str, list[int]]:
    for i in range(5):
        prompt = [ord(c) for c in f"prompt {i}: " + "lorem ipsum dolor " * (1 + 3 * i)]
        engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=12, temperature=0.0))
    results, _ = run_to_completion(engine)
    return {request_id: tokens for request_id, (tokens, *_rest) in results.items()}


def test_slo_policy_generates_what_continuous_generates(runners):
    """The slo policy changes only how prompts are chunked across steps, never the tokens."""
    continuous = _all_outputs(_engine(runners))
    # A target no step can meet: every step gets only the prefill floor (5 tokens).
    tight = _engine(runners, policy="slo", slo_target_ms=0.1, slo_min_prefill_tokens=5)
    assert _all_outputs(tight) == continuous
    records, _, _ = tight.steps_after(0, limit=10_000)
    assert records
    for r in records:  # the budget: each decode's token plus the floor, never more
        assert r["num_prefill_tokens"] + r["num_decode_tokens"] <= r["token_budget"], r
        assert r["token_budget"] <= r["num_seqs"] + 5, r
    assert any(r["predicted_seconds"] is not None for r in records)  # the model got ready
    loose = _engine(runners, policy="slo", slo_target_ms=10_000.0)
    assert _all_outputs(loose) == continuous


# -- prefix caching --------------------------------------------------------------------------

# 144 tokens every question shares, then "Question " (153: 38 full blocks of 4).
LONG_PREFIX = [ord(c) for c in "System: answer briefly, precisely and politely. " * 3]


def _questions(engine: Engine, *, concurrent: bool) -> dict[str, list[int]]:
    """Four greedy questions after LONG_PREFIX: one after another, or all at once."""
    tokens: dict[str, list[int]] = {}
    for i in range(4):
        prompt = LONG_PREFIX + [ord(c) for c in f"Question {i}: why{'?' * i}"]
        engine.add_request(f"q{i}", prompt, SamplingParams(max_tokens=8, temperature=0.0))
        if not concurrent:
            results, _ = run_to_completion(engine)
            tokens.update({rid: result[0] for rid, result in results.items()})
    if concurrent:
        results, _ = run_to_completion(engine)
        tokens.update({rid: result[0] for rid, result in results.items()})
    return tokens


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
@pytest.mark.parametrize("chunk", [512, 16])
def test_greedy_tokens_are_the_same_with_the_prefix_cache_on_and_off(runners, concurrent, chunk):
    off = _questions(
        _engine(runners, max_prefill_chunk_tokens=chunk, enable_prefix_caching=False),
        concurrent=concurrent,
    )
    engine = _engine(runners, max_prefill_chunk_tokens=chunk, enable_prefix_caching=True)
    on = _questions(engine, concurrent=concurrent)
    assert on == off and all(len(t) == 8 for t in on.values())
    stats = engine.stats()
    # The three later questions find the 38 shared full blocks (152 tokens) cached. Blocks are
    # registered as they are scheduled, so questions admitted in the same step share them; with
    # 16-token chunks each admission finds the chunks admitted before it: 16, 32, 48 (vLLM too).
    expected = 16 + 32 + 48 if concurrent and chunk == 16 else 3 * 152
    assert stats.num_prefix_cache_hits_total == expected
    assert stats.num_kv_blocks_used == 0 and stats.num_kv_blocks_cached > 0


def test_a_small_pool_evicts_cached_blocks_instead_of_preempting(runners):
    """Three long unrelated prompts one after another in a 48-block pool: each needs blocks the
    cache holds for the previous one, which it evicts; nothing is preempted or refused."""
    prompts = [[ord(c) for c in f"{i} lorem ipsum dolor sit amet " * 5] for i in range(3)]

    def run(caching: bool) -> tuple[dict[str, list[int]], Engine]:
        engine = _engine(runners, num_kv_blocks=48, enable_prefix_caching=caching)
        tokens = {}
        for i, prompt in enumerate(prompts):
            engine.add_request(f"p{i}", prompt, SamplingParams(max_tokens=6, temperature=0.0))
            results, _ = run_to_completion(engine)
            tokens.update({rid: result[0] for rid, result in results.items()})
        return tokens, engine

    off, _ = run(False)
    on, engine = run(True)
    assert on == off
    stats = engine.stats()
    assert stats.num_preemptions_total == 0 and stats.num_kv_blocks_used == 0
    assert 0 < stats.num_kv_blocks_cached <= 48
    assert sum(stats.num_finished_total_by_reason.values()) == 3
