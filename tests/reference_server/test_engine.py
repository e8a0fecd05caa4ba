"""Engine: stop conditions, seeds, request validation and admission, live batching changes,
the step log, statistics, and that importing the engine does not import torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reference_server import (
    AdmissionError,
    ConfigError,
    EngineFailure,
    RequestValidationError,
    SamplingParams,
)
from reference_server.engine import Engine
from tests.reference_server.fakes import FakeRunner, make_engine, run_to_completion

PROMPT = [72, 105, 33]


def _greedy(max_tokens: int = 8, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=5, **kwargs)


def _generate(params: SamplingParams, *, runner: FakeRunner | None = None, **engine_kwargs):
    engine = make_engine(runner=runner, engine_kwargs=engine_kwargs)
    engine.add_request("r", PROMPT, params)
    results, _ = run_to_completion(engine)
    return results["r"], engine


# -- stop conditions ----------------------------------------------------------------------


def test_max_tokens_finishes_with_length_and_text_matches_tokens():
    (tokens, text, reason), engine = _generate(_greedy(12))
    assert reason == "length" and len(tokens) == 12
    assert text == engine.tokenizer.decode(tokens)


def test_stop_token_id_finishes_with_stop():
    (tokens, _, _), _ = _generate(_greedy(12))
    (stopped, _, reason), _ = _generate(_greedy(12, stop_token_ids=(tokens[4],)))
    first = tokens.index(tokens[4])
    assert reason == "stop" and stopped == tokens[: first + 1]


def test_eos_stops_unless_ignore_eos():
    (tokens, _, _), _ = _generate(_greedy(12))
    eos = tokens[3]
    (stopped, _, reason), _ = _generate(_greedy(12), runner=FakeRunner(eos_token_id=eos))
    assert reason == "stop" and stopped == tokens[: tokens.index(eos) + 1]
    (ignored, _, reason), _ = _generate(
        _greedy(12, ignore_eos=True), runner=FakeRunner(eos_token_id=eos)
    )
    assert reason == "length" and ignored == tokens


def test_stop_string_truncates_text_and_never_streams_part_of_it():
    (_, text, _), _ = _generate(_greedy(16))
    stop = text[5:8]
    engine = make_engine()
    engine.add_request("r", PROMPT, _greedy(16, stop=(stop, "never-there")))
    pieces = []
    while engine.has_unfinished():
        pieces.extend(o.new_text for o in engine.step().outputs)
    streamed = "".join(pieces)
    assert streamed == text[: text.index(stop)]
    assert all(stop not in "".join(pieces[: i + 1]) for i in range(len(pieces)))


# -- seeds --------------------------------------------------------------------------------


def test_requests_without_seed_get_one_from_the_engine_rng_at_add_time():
    def seeds(engine_seed: int) -> list[int]:
        engine = make_engine(engine_kwargs={"seed": engine_seed})
        for i in range(3):
            engine.add_request(f"r{i}", PROMPT, SamplingParams(max_tokens=2))
        return [s.sampling_params.seed for s in engine.scheduler.waiting()]

    first = seeds(7)
    assert all(isinstance(s, int) for s in first) and len(set(first)) == 3
    assert seeds(7) == first
    assert seeds(8) != first


# -- validation and admission -------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_id", "prompt", "params", "priority", "field"),
    [
        ("r", PROMPT, SamplingParams(max_tokens=70), "interactive", "max_tokens"),
        ("r", PROMPT, SamplingParams(max_tokens=101), "interactive", "max_tokens"),
        ("r", [1] * 64, SamplingParams(max_tokens=1), "interactive", "prompt"),
        ("r", [], SamplingParams(), "interactive", "prompt"),
        ("r", [1, 9999], SamplingParams(), "interactive", "prompt"),
        ("r", [1, True], SamplingParams(), "interactive", "prompt"),
        ("r", PROMPT, SamplingParams(), "urgent", "priority"),
        ("", PROMPT, SamplingParams(), "interactive", "request_id"),
    ],
)
def test_invalid_requests_raise_validation_error_naming_the_field(
    request_id, prompt, params, priority, field
):
    engine = make_engine(engine_kwargs={"max_model_len": 64, "max_tokens_cap": 100})
    with pytest.raises(RequestValidationError) as info:
        engine.add_request(request_id, prompt, params, priority=priority)
    assert info.value.field == field
    assert not engine.has_unfinished()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"seed": -1}, "seed"),
        ({"stop": ("",)}, "stop"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
    ],
)
def test_sampling_params_name_the_invalid_field(kwargs, field):
    with pytest.raises(RequestValidationError) as info:
        SamplingParams(**kwargs)
    assert info.value.field == field


def test_duplicate_request_id_and_request_bigger_than_the_cache_are_refused():
    engine = make_engine(runner=FakeRunner(num_kv_blocks=4, block_size=4))
    engine.add_request("r", PROMPT, SamplingParams(max_tokens=4))
    with pytest.raises(RequestValidationError, match="already in flight"):
        engine.add_request("r", PROMPT, SamplingParams(max_tokens=4))
    with pytest.raises(RequestValidationError, match="KV cache") as info:
        engine.add_request("big", PROMPT, SamplingParams(max_tokens=20))
    assert info.value.field == "max_tokens"


def test_full_class_queue_refuses_with_queue_full_and_retry_after():
    engine = make_engine(interactive={"max_waiting": 2}, batch={"max_waiting": 1})
    engine.add_request("a", PROMPT, SamplingParams())
    engine.add_request("b", PROMPT, SamplingParams())
    with pytest.raises(AdmissionError) as info:
        engine.add_request("c", PROMPT, SamplingParams())
    assert info.value.reason == "queue_full"
    assert info.value.retry_after_seconds is not None and info.value.retry_after_seconds > 0
    engine.add_request("bg", PROMPT, SamplingParams(), priority="batch")  # its own limit
    assert engine.stats().num_rejected_total_by_reason == {"queue_full": 1}
    engine.step()  # admitted requests leave the queue, making room
    engine.add_request("c", PROMPT, SamplingParams())


# -- live batching changes ----------------------------------------------------------------


def test_update_batching_applies_and_returns_previous_settings():
    engine = make_engine()
    before = engine.get_batching()
    previous = engine.update_batching({"policy": "dynamic", "interactive": {"max_wait_ms": 5}})
    assert previous == before
    now = engine.get_batching()
    assert now["policy"] == "dynamic" and now["interactive"]["max_wait_ms"] == 5
    assert now["interactive"]["max_batch_size"] == before["interactive"]["max_batch_size"]
    assert engine.scheduler.config.policy == "dynamic"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"policy": "fast"}, "policy"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_seqs": "8"}, "max_num_seqs"),
        ({"max_num_batched_tokens": 8, "max_num_seqs": 16}, "max_num_batched_tokens"),
        ({"interactive": {"max_wait_ms": -1}}, "interactive.max_wait_ms"),
        ({"batch": {"dispatch_threshold": 0}}, "batch.dispatch_threshold"),
        ({"batch": {"window": 3}}, "batch.window"),
        ({"turbo": True}, "turbo"),
        ({"policy": "static", "shared_queue": "yes"}, "shared_queue"),
    ],
)
def test_invalid_batching_update_names_field_and_changes_nothing(changes, field):
    engine = make_engine()
    before = engine.get_batching()
    with pytest.raises(ConfigError) as info:
        engine.update_batching(changes)
    assert info.value.field == field
    assert engine.get_batching() == before
    assert engine.scheduler.config.to_dict() == before


def test_switching_to_static_mid_flight_keeps_running_batch_and_finishes_everything():
    runner = FakeRunner()
    engine = make_engine(runner=runner)
    engine.add_request("a", PROMPT, _greedy(6))
    engine.step()
    engine.update_batching({"policy": "static"})
    engine.add_request("b", PROMPT, _greedy(2))
    results, _ = run_to_completion(engine)
    assert {r[2] for r in results.values()} == {"length"}
    first_b = next(i for i, call in enumerate(runner.calls) if any(c[0] == "b" for c in call))
    last_a = max(i for i, call in enumerate(runner.calls) if any(c[0] == "a" for c in call))
    assert first_b > last_a


# -- step log and stats -------------------------------------------------------------------


def test_step_log_keeps_recent_records_and_exposes_gaps(tmp_path):
    path = tmp_path / "steps.jsonl"
    engine = make_engine(engine_kwargs={"step_log_size": 5, "step_log_path": str(path)})
    engine.add_request("r", PROMPT, _greedy(12))
    run_to_completion(engine)
    engine.close()
    records, oldest, latest = engine.step_log.after(0)
    assert latest == 12 and oldest == 8
    assert [r["seq"] for r in records] == [8, 9, 10, 11, 12]  # a poller at 0 missed 1..7
    records, _, _ = engine.step_log.after(10, limit=1)
    assert [r["seq"] for r in records] == [11]
    assert engine.step_log.after(12)[0] == []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, 13))
    first = lines[0]
    assert first["num_prefill_tokens"] == len(PROMPT) and first["num_decode_tokens"] == 0
    assert first["policy"] == "continuous" and first["num_running"] == {
        "interactive": 1,
        "batch": 0,
    }
    assert lines[1]["num_decode_tokens"] == 1
    assert all(0 <= line["forward_seconds"] <= line["duration_seconds"] for line in lines)


def test_stats_count_tokens_and_finish_reasons():
    engine = make_engine()
    engine.add_request("a", PROMPT, _greedy(4))
    engine.add_request("b", [1, 2], _greedy(3), priority="batch")
    engine.step()
    stats = engine.stats()
    assert stats.num_running_by_class == {"interactive": 1, "batch": 1}
    assert stats.num_kv_blocks_used == 2 and stats.kv_usage_ratio == pytest.approx(2 / 256)
    run_to_completion(engine)
    stats = engine.stats()
    assert stats.num_prompt_tokens_total == 5
    assert stats.num_prefill_tokens_total == 5
    assert stats.num_generation_tokens_total == 7
    assert stats.num_finished_total_by_reason["length"] == 2
    assert stats.num_kv_blocks_used == 0 and stats.num_kv_blocks_peak >= 2
    assert stats.num_steps_total == 4


def test_request_output_carries_timing():
    engine = make_engine()
    engine.add_request("a", PROMPT, _greedy(2), arrival_time=1.0)
    output = engine.step().outputs[0]
    assert output.arrival_time == 1.0
    assert output.first_scheduled_time is not None and output.first_token_time is not None
    assert output.first_scheduled_time <= output.first_token_time
    assert (output.num_prompt_tokens, output.num_output_tokens) == (3, 1)


def test_embed_validates_input_and_calls_runner():
    engine = make_engine()
    vectors = engine.embed([[1, 2], [3]])
    assert len(vectors) == 2
    with pytest.raises(RequestValidationError):
        engine.embed([[]])
    with pytest.raises(RequestValidationError):
        engine.embed([[100_000]])


def test_engine_rejects_a_non_config():
    # A plain dict (what a caller might pass by mistake) is refused up front, naming `config`.
    with pytest.raises(ConfigError, match="must be an EngineConfig, got dict") as caught:
        Engine({"model": "tiny"}, runner=FakeRunner())  # type: ignore[arg-type]
    assert caught.value.field == "config"


def test_importing_the_engine_does_not_import_torch():
    code = (
        "import sys, reference_server, reference_server.engine, reference_server.async_engine;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_a_failed_forward_pass_fails_that_steps_requests_frees_their_kv_and_serves_on():
    runner = FakeRunner(fail_on_call=1)
    engine = make_engine(runner=runner)
    engine.add_request("a", [72, 105], SamplingParams(max_tokens=4, seed=1))
    engine.step()  # the prefill works
    engine.add_request("b", [72, 105, 33], SamplingParams(max_tokens=4, seed=2))
    result = engine.step()  # a's decode and b's prefill fail together
    assert sorted(rid for rid, _ in result.failures) == ["a", "b"]
    assert all(isinstance(error, EngineFailure) for _, error in result.failures)
    assert not engine.has_unfinished()
    assert engine.stats().num_kv_blocks_used == 0
    runner.fail_on_call = None
    engine.add_request("c", [72], SamplingParams(max_tokens=2, seed=3))
    results, _ = run_to_completion(engine)
    assert results["c"][2] == "length"
