"""The engine over the real (tiny, CPU) model generates valid, printable UTF-8: every output's
bytes decode strictly, max_tokens never cuts a character, each token is one byte of the text,
and preemption by recompute mid-character changes nothing."""

from __future__ import annotations

import random

import pytest

from reference_server import BatchingConfig, Engine, EngineConfig, SamplingParams
from tests.reference_server.fakes import run_to_completion

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # builds the tiny model and runs a few hundred real steps

BLOCK_SIZE = 4
TINY_BLOCK_BYTES = 2 * 2 * 2 * 32 * BLOCK_SIZE * 4  # k+v, layers, kv heads, head dim, fp32
EOS = 257


@pytest.fixture(scope="module")
def runners():
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
                max_model_len=128,
                num_threads=1,
            )
        return built[num_kv_blocks]

    return get


def _engine(runners, num_kv_blocks: int, **batching) -> Engine:
    config = EngineConfig(
        model="tiny",
        device="cpu",
        seed=0,
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=num_kv_blocks * TINY_BLOCK_BYTES,
        watermark_ratio=0.0,
        max_model_len=128,
        batching=BatchingConfig.from_dict(batching),
    )
    return Engine(config, runner=runners(num_kv_blocks))


def _requests(count: int, seed: int) -> dict[str, tuple[list[int], SamplingParams]]:
    rng = random.Random(seed)
    requests = {}
    for i in range(count):
        prompt = list(rng.randbytes(rng.randrange(1, 20)))  # prompts may be invalid: no matter
        # Temperature 50 flattens the logits over every allowed byte, so 2-, 3- and 4-byte
        # characters start often; max_tokens 1..4 exercises the budget rule.
        params = SamplingParams(
            max_tokens=rng.choice([1, 2, 3, 4, 5, 9, 17, 24]),
            temperature=rng.choice([0.0, 1.0, 50.0, 50.0]),
            top_p=rng.choice([1.0, 0.95]),
            seed=rng.randrange(2**32),
        )
        requests[f"r{i}"] = (prompt, params)
    return requests


def _run(engine: Engine, requests: dict[str, tuple[list[int], SamplingParams]]):
    for request_id, (prompt, params) in requests.items():
        engine.add_request(request_id, prompt, params)
    results, _ = run_to_completion(engine)
    return results, engine.stats()


def _assert_valid_text(tokens: list[int], text: str) -> None:
    assert max(tokens) < 256
    assert bytes(tokens).decode("utf-8") == text  # strict: raises on any invalid byte
    assert "\ufffd" not in text
    assert not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0 for c in text)


def test_outputs_are_valid_utf8_cut_at_characters_and_unchanged_by_preemption(runners):
    requests = _requests(40, seed=1)
    roomy, _ = _run(_engine(runners, 512), requests)
    multibyte = 0
    for request_id, (tokens, text, reason) in roomy.items():
        assert reason == "length"
        assert len(tokens) == requests[request_id][1].max_tokens  # a token per byte, all text
        _assert_valid_text(tokens, text)
        multibyte += sum(len(c.encode()) > 1 for c in text)
    assert multibyte > 20  # the test did exercise multi-byte characters
    # 24 blocks of 4 tokens cannot hold 40 growing requests: many are preempted (often in
    # the middle of a character) and recomputed, and must draw the very same tokens.
    squeezed, stats = _run(_engine(runners, 24, max_prefill_chunk_tokens=8), requests)
    assert stats.num_preemptions_total > 0
    assert squeezed == roomy


def test_stop_token_ids_and_min_tokens_still_end_on_a_character(runners):
    engine = _engine(runners, 512)
    rng = random.Random(2)
    requests = {}
    for i in range(24):
        params = SamplingParams(
            max_tokens=16,
            temperature=50.0,
            seed=rng.randrange(2**32),
            # 90..9F complete many 2-byte characters and are mid-character bytes of others;
            # no state allows only them, so the mask never runs out of choices.
            stop_token_ids=(*range(0x90, 0xA0), EOS) if i % 2 else (EOS,),
            min_tokens=4,
        )
        requests[f"s{i}"] = ([65 + i], params)
    results, _ = _run(engine, requests)
    stopped = 0
    for tokens, text, reason in results.values():
        assert len(tokens) >= 4
        if reason == "stop":
            stopped += 1
            assert tokens[-1] == EOS or 0x90 <= tokens[-1] < 0xA0
        # EOS carries no text; a byte stop token's character is part of the text.
        _assert_valid_text([t for t in tokens if t != EOS], text)
    assert stopped > 0
    assert any(tokens[-1] < 256 for tokens, _, reason in results.values() if reason == "stop")
