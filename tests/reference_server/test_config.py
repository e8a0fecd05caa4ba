"""EngineConfig / BatchingConfig: defaults are valid, dicts round-trip, and every bad value or
unknown key raises ConfigError naming its dotted field."""

from __future__ import annotations

import pytest

from reference_server.config import BatchingConfig, ClassConfig, EngineConfig
from reference_server.errors import ConfigError


def test_defaults_are_valid_and_round_trip_through_dicts():
    config = EngineConfig()
    assert config.batching.policy == "continuous"
    assert config.batching.interactive.max_waiting > 0
    assert not config.batching.shared_queue
    assert config.batching.enable_prefix_caching is True  # vLLM's default
    assert EngineConfig.from_dict(config.to_dict()) == config
    custom = EngineConfig.from_dict(
        {"seed": 3, "batching": {"policy": "static", "batch": {"max_batch_size": 4}}}
    )
    assert custom.batching.batch == ClassConfig(
        max_waiting=1024, max_batch_size=4, max_wait_ms=50.0
    )
    assert EngineConfig.from_dict(custom.to_dict()) == custom


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"modle": "tiny"}, "modle"),
        ({"device": "tpu"}, "device"),
        ({"dtype": "int8"}, "dtype"),
        ({"seed": -1}, "seed"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 16.0}, "block_size"),
        ({"kv_cache_memory_bytes": 0}, "kv_cache_memory_bytes"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"watermark_ratio": 0.9}, "watermark_ratio"),
        ({"max_model_len": 1}, "max_model_len"),
        ({"max_tokens_cap": True}, "max_tokens_cap"),
        ({"step_log_size": 0}, "step_log_size"),
        ({"step_log_path": ""}, "step_log_path"),
        ({"torch_num_threads": 0}, "torch_num_threads"),
        ({"torch_num_threads": 1.5}, "torch_num_threads"),
        ({"torch_num_threads": "auto"}, "torch_num_threads"),
        ({"batching": []}, "batching"),
        ({"batching": {"policy": "greedy"}}, "batching.policy"),
        ({"batching": {"max_prefill_chunk_tokens": 0}}, "batching.max_prefill_chunk_tokens"),
        ({"batching": {"max_starvation_steps": 0}}, "batching.max_starvation_steps"),
        ({"batching": {"interactive": {"max_waiting": -1}}}, "batching.interactive.max_waiting"),
        ({"batching": {"batch": {"max_wait_ms": float("nan")}}}, "batching.batch.max_wait_ms"),
        ({"batching": {"batch": {"colour": 1}}}, "batching.batch.colour"),
        ({"batching": {"interactive": 5}}, "batching.interactive"),
        ({"batching": {"enable_prefix_caching": "yes"}}, "batching.enable_prefix_caching"),
        ({"batching": {"enable_prefix_caching": 0}}, "batching.enable_prefix_caching"),
    ],
)
def test_bad_values_raise_config_error_naming_the_dotted_field(data, field):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_dict(data)
    assert info.value.field == field
    assert info.value.message


def test_token_budget_must_cover_one_decode_per_sequence():
    with pytest.raises(ConfigError) as info:
        BatchingConfig(max_num_seqs=64, max_num_batched_tokens=32)
    assert info.value.field == "max_num_batched_tokens"


def test_merged_applies_partial_nested_changes_only():
    base = BatchingConfig()
    merged = base.merged({"interactive": {"dispatch_threshold": 4}, "max_num_seqs": 8})
    assert merged.interactive.dispatch_threshold == 4
    assert merged.interactive.max_wait_ms == base.interactive.max_wait_ms
    assert merged.max_num_seqs == 8 and merged.batch == base.batch


def test_configs_are_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        BatchingConfig("dynamic")  # type: ignore[misc]
    config = BatchingConfig()
    with pytest.raises(AttributeError):
        config.policy = "static"  # type: ignore[misc]


def test_torch_num_threads_defaults_to_auto_and_accepts_a_count():
    assert EngineConfig().torch_num_threads is None
    config = EngineConfig.from_dict({"torch_num_threads": 3})
    assert config.torch_num_threads == 3
    assert EngineConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(("cpu_count", "expected"), [(1, 1), (2, 1), (4, 3), (None, 1), (64, 8)])
def test_auto_torch_threads_on_cpu_leave_one_core_and_cap_at_eight(
    monkeypatch, cpu_count, expected
):
    from reference_server import model_runner

    monkeypatch.setattr(model_runner.os, "cpu_count", lambda: cpu_count)
    assert model_runner.auto_num_threads("cpu") == expected


def test_engine_passes_the_resolved_thread_count_to_the_runner(monkeypatch):
    from reference_server import engine as engine_module
    from reference_server import model_runner

    seen: list[object] = []

    class Stop(Exception):
        pass

    def fake_runner(**kwargs):
        seen.append(kwargs["num_threads"])
        raise Stop

    monkeypatch.setattr(model_runner, "ModelRunner", fake_runner)
    monkeypatch.setattr(model_runner.os, "cpu_count", lambda: 4)
    for threads in (None, 2):
        with pytest.raises(Stop):
            engine_module.Engine(EngineConfig(device="cpu", torch_num_threads=threads))
    assert seen == [3, 2]  # auto on 4 cores: 3; an explicit count passes through


def test_an_integer_past_64_bits_from_json_is_named_as_such():
    with pytest.raises(ConfigError, match="at most 64 bits, got 1e\\+20") as info:
        EngineConfig.from_dict({"batching": {"max_num_seqs": 1e20}})
    assert info.value.field == "batching.max_num_seqs"
