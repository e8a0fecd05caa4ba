"""Mixed batches served as one forward pass (the real tiny model on CPU): rows with different
temperature, top_p, top_k, seed, penalties, logit_bias, stop and thinking mode share one step,
each sampled with its own settings; a row's answer is the same alone and in company, after a
preemption recompute and from the prefix cache; and the two failure presets
(`sampling_alignment: strict`, `shared_sampler_seed`) do what they claim."""

from __future__ import annotations

import pytest

from reference_server import BatchingConfig, Engine, EngineConfig, SamplingParams

pytest.importorskip("torch")

BLOCK_SIZE = 16
PROMPT = [1, *(ord(c) for c in "Mixed batches, one forward pass.")]
SEEDED = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, seed=4242, ignore_eos=True)
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
# Every kind of row the engine must sample side by side.
COMPANIONS = [
    SamplingParams(max_tokens=12, temperature=1.3, top_k=5, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=0.7, top_p=0.5, seed=7, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=0.0, presence_penalty=2.0, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=0.8, frequency_penalty=1.5, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=0.0, repetition_penalty=1.8, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=0.0, logit_bias={ord("Q"): 100.0}, ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=1.0, stop=("e",), ignore_eos=True),
    SamplingParams(max_tokens=12, temperature=1.0, thinking=True, thinking_tokens=5),
]


@pytest.fixture(scope="module")
def runner():
    from reference_server.model_runner import ModelRunner

    return ModelRunner(
        model="tiny", device="cpu", seed=0, block_size=BLOCK_SIZE, max_model_len=256,
        num_kv_blocks_override=256,
    )  # fmt: skip


def _engine(runner, **batching) -> Engine:
    config = EngineConfig(
        device="cpu", block_size=BLOCK_SIZE, max_model_len=256, watermark_ratio=0.0,
        num_gpu_blocks_override=runner.num_kv_blocks,
        batching=BatchingConfig.from_dict(batching),
    )  # fmt: skip
    runner.shared_sampler_seed = False
    return Engine(config, runner=runner)


def _run(engine: Engine, requests: dict[str, SamplingParams], prompts=None):
    """Tokens per request, and the step records of the run."""
    for request_id, params in requests.items():
        prompt = (prompts or {}).get(request_id, PROMPT)
        engine.add_request(request_id, list(prompt), params)
    tokens: dict[str, list[int]] = {request_id: [] for request_id in requests}
    records = []
    while engine.has_unfinished():
        result = engine.step()
        if result.record is not None:
            records.append(result.record)
        for output in result.outputs:
            tokens[output.request_id].extend(output.new_token_ids)
    return tokens, records


def _mixed(target: SamplingParams) -> dict[str, SamplingParams]:
    return {"target": target, **{f"c{i}": params for i, params in enumerate(COMPANIONS)}}


@pytest.mark.parametrize("target", [SEEDED, GREEDY], ids=["seeded", "greedy"])
def test_a_row_answers_the_same_alone_and_in_a_mixed_batch_served_in_one_step(runner, target):
    alone, _ = _run(_engine(runner), {"target": target})
    mixed, records = _run(_engine(runner), _mixed(target))
    assert mixed["target"] == alone["target"]
    # No fall-back to one at a time: the decode steps carry every row at once.
    assert max(record.num_seqs for record in records) == len(COMPANIONS) + 1
    decode_steps = [r for r in records if r.num_prefill_tokens == 0]
    assert decode_steps and decode_steps[0].num_seqs == len(COMPANIONS) + 1


def test_greedy_rows_take_the_argmax_whatever_their_neighbours(runner):
    engine = _engine(runner)
    mask = runner.allowed_tokens
    argmax: dict[tuple[str, int], int] = {}

    def apply(logits, seqs):  # type: ignore[no-untyped-def]
        type(mask).apply(mask, logits, seqs)
        for row, seq in enumerate(seqs):
            argmax[(seq.request_id, len(seq.output_token_ids))] = int(logits[row].argmax())

    mask.apply = apply  # type: ignore[method-assign]
    try:
        tokens, _ = _run(engine, _mixed(GREEDY))
    finally:
        del mask.apply
    assert tokens["target"] == [argmax[("target", i)] for i in range(len(tokens["target"]))]


def test_penalties_and_logit_bias_apply_to_their_own_row_only(runner):
    bias = SamplingParams(max_tokens=8, temperature=0.0, logit_bias={ord("Q"): 100.0})
    presence = SamplingParams(max_tokens=16, temperature=0.0, presence_penalty=2.0)
    tokens, _ = _run(_engine(runner), {"bias": bias, "presence": presence, "plain": GREEDY})
    assert tokens["bias"] == [ord("Q")] * 8
    # A presence penalty of 2 outweighs the tiny model's whole logit spread: no token twice.
    assert len(set(tokens["presence"])) == len(tokens["presence"]) == 16
    alone, _ = _run(_engine(runner), {"plain": GREEDY})
    assert tokens["plain"] == alone["plain"]


def test_repetition_and_frequency_penalties_change_the_answer_they_are_given_to(runner):
    plain = SamplingParams(max_tokens=24, temperature=0.0)
    tokens, _ = _run(
        _engine(runner),
        {
            "plain": plain,
            "repetition": SamplingParams(max_tokens=24, temperature=0.0, repetition_penalty=2.0),
            "frequency": SamplingParams(max_tokens=24, temperature=0.0, frequency_penalty=2.0),
        },
    )
    assert tokens["repetition"] != tokens["plain"]
    assert len(set(tokens["frequency"])) == 24  # every repeat costs 2: none happens


def test_a_seeded_answer_survives_preemption_recompute_and_the_prefix_cache(runner):
    alone, _ = _run(_engine(runner), {"target": SEEDED})
    # A pool of 12 blocks: the batch-class target runs first, chat traffic then preempts it.
    from reference_server.model_runner import ModelRunner

    small = ModelRunner(
        model="tiny", device="cpu", seed=0, block_size=BLOCK_SIZE, max_model_len=256,
        num_kv_blocks_override=12,
    )  # fmt: skip
    engine = _engine(small)
    engine.add_request("target", list(PROMPT), SEEDED, priority="batch")
    tokens: list[int] = []
    for _ in range(3):
        for output in engine.step().outputs:
            tokens.extend(output.new_token_ids)
    for i in range(6):
        prompt = [1, *([65 + i] * 60)]
        engine.add_request(f"chat{i}", prompt, SamplingParams(max_tokens=40, ignore_eos=True))
    preemptions = 0
    while engine.has_unfinished():
        for output in engine.step().outputs:
            if output.request_id == "target":
                tokens.extend(output.new_token_ids)
                preemptions = output.num_preemptions
    assert preemptions >= 1
    assert tokens == alone["target"]
    # The same request again on a warm prefix cache: its prompt's KV comes from the cache.
    cached = _engine(runner)
    first, _ = _run(cached, {"a": SEEDED})
    second, records = _run(cached, {"b": SEEDED})
    assert sum(r.num_cached_tokens for r in records) > 0
    assert first["a"] == second["b"] == alone["target"]


def test_thinking_and_plain_rows_share_steps_and_count_their_reasoning(runner):
    engine = _engine(runner)
    thinking = SamplingParams(max_tokens=10, thinking=True, thinking_tokens=4, stop=("a",))
    engine.add_request("think", list(PROMPT), thinking)
    engine.add_request("plain", list(PROMPT), GREEDY)
    outputs = {"think": [], "plain": []}
    while engine.has_unfinished():
        for output in engine.step().outputs:
            outputs[output.request_id].append(output)
    think = outputs["think"]
    reasoning = [o for o in think if o.new_reasoning_text]
    answer = [o for o in think if o.new_text]
    assert reasoning and all(o.num_output_tokens <= 4 for o in reasoning)
    assert all(o.num_output_tokens > 4 for o in answer)
    assert think[-1].num_reasoning_tokens == 4
    assert all(o.num_reasoning_tokens == 0 for o in outputs["plain"])
    # Reasoning is exactly its tokens' text, whole characters.
    reasoning_ids = [t for o in think for t in o.new_token_ids][:4]
    text = "".join(o.new_reasoning_text for o in think)
    assert text.encode("utf-8") == bytes(reasoning_ids)


def test_max_tokens_below_the_thinking_length_is_all_reasoning(runner):
    engine = _engine(runner)
    engine.add_request("t", list(PROMPT), SamplingParams(max_tokens=3, thinking=True,
                                                         thinking_tokens=8))  # fmt: skip
    outputs = []
    while engine.has_unfinished():
        outputs.extend(engine.step().outputs)
    assert outputs[-1].finish_reason == "length"
    assert outputs[-1].num_reasoning_tokens == outputs[-1].num_output_tokens == 3
    assert "".join(o.new_text for o in outputs) == ""


def test_strict_alignment_serves_one_signature_per_step_with_the_same_tokens(runner):
    requests = {"a": SEEDED, "b": GREEDY, "c": COMPANIONS[0], "d": SEEDED}
    prompts = {"d": [1, *(ord(c) for c in "another prompt")]}
    mixed, mixed_records = _run(_engine(runner), requests, prompts)
    strict, strict_records = _run(_engine(runner, sampling_alignment="strict"), requests, prompts)
    assert strict == mixed  # each row is still sampled with its own settings
    assert max(r.num_seqs for r in mixed_records) == 4
    # a and d share a signature (seeded, same settings): at most two rows per step.
    assert max(r.num_seqs for r in strict_records) == 2
    assert len(strict_records) > len(mixed_records)


def test_shared_sampler_seed_makes_a_seeded_answer_depend_on_its_company(runner):
    def run(requests):
        engine = _engine(runner, shared_sampler_seed=True)
        assert runner.shared_sampler_seed is True
        return _run(engine, requests)[0]

    alone = run({"target": SEEDED})
    assert run({"target": SEEDED}) == alone  # alone it is reproducible
    company = {"first": COMPANIONS[0], "target": SEEDED}
    assert run(company)["target"] != alone["target"]
    # The default, per-row noise: the company does not matter.
    default_alone = _run(_engine(runner), {"target": SEEDED})[0]["target"]
    assert _run(_engine(runner), company)[0]["target"] == default_alone


def _target_logits(engine: Engine, requests: dict[str, SamplingParams], prompts=None):
    mask = engine.runner.allowed_tokens
    captured = {}

    def apply(logits, seqs):  # type: ignore[no-untyped-def]
        for row, seq in enumerate(seqs):
            if seq.request_id == "target":
                captured[len(seq.output_token_ids)] = logits[row].clone()
        type(mask).apply(mask, logits, seqs)

    mask.apply = apply  # type: ignore[method-assign]
    try:
        _run(engine, requests, prompts)
    finally:
        del mask.apply
    return captured


def test_the_batch_invariant_forward_gives_bit_identical_logits_in_any_batch(runner):
    """The default forward (batch_invariant on): the target's raw logits at every position are
    bit-identical alone and beside 8 mixed rows of other prompt lengths (docs/engine.md)."""
    import torch

    assert runner.batch_invariant
    alone = _target_logits(_engine(runner), {"target": SEEDED})
    prompts = {f"c{i}": [1, *([70 + i] * (5 + 27 * i))] for i in range(len(COMPANIONS))}
    batched = _target_logits(_engine(runner), _mixed(SEEDED), prompts)
    assert alone.keys() == batched.keys()
    assert all(torch.equal(alone[p], batched[p]) for p in alone)
