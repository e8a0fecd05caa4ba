"""Pieces of the HTTP layer that need no server: SSE framing, auth, metrics text, CLI flags."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import typing

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reference_server.api.auth import is_loopback
from reference_server.api.cli import build_parser, engine_flags, parse_configs
from reference_server.api.errors import APIError, from_engine_error
from reference_server.api.metrics import ServerMetrics
from reference_server.api.server_config import ServerConfig, ServerConfigError
from reference_server.api.sse import SSE_DONE, sse_event
from reference_server.config import BatchingConfig, ClassConfig, EngineConfig
from reference_server.errors import AdmissionError, EngineDeadError, RequestValidationError
from reference_server.outputs import EngineStats
from reference_server.step_record import StepRecord

BINDING_METRICS = {
    "histogram": [
        "batchgate_step_duration_seconds", "batchgate_step_num_seqs", "batchgate_step_num_tokens",
        "batchgate_ttft_seconds", "batchgate_inter_token_seconds", "batchgate_e2e_seconds",
        "batchgate_queue_seconds", "batchgate_embedding_batch_size",
        "batchgate_embedding_latency_seconds",
    ],
    "gauge": [
        "batchgate_num_requests_running", "batchgate_num_requests_waiting",
        "batchgate_kv_blocks_used", "batchgate_kv_blocks_cached", "batchgate_kv_blocks_capacity",
        "batchgate_kv_usage_ratio",
        "batchgate_kv_usage_peak_ratio", "batchgate_device_memory_allocated_bytes",
        "batchgate_device_memory_reserved_bytes", "batchgate_device_memory_peak_bytes",
        "process_resident_memory_bytes", "batchgate_info",
    ],
    "counter": [
        "batchgate_preemptions", "batchgate_recomputed_tokens", "batchgate_prompt_tokens",
        "batchgate_prefill_tokens", "batchgate_generation_tokens", "batchgate_requests_finished",
        "batchgate_requests_rejected", "batchgate_requests_aborted",
        "batchgate_embedding_requests", "batchgate_prefix_cache_queries",
        "batchgate_prefix_cache_hits",
    ],
}  # fmt: skip


def test_sse_event_is_one_data_line_and_a_blank_line():
    assert sse_event({"a": 1, "b": "é"}) == 'data: {"a":1,"b":"é"}\n\n'.encode()
    assert SSE_DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("localhost", True),
     ("10.0.0.1", False), ("203.0.113.5", False), ("", False), (None, False), ("garbage", False)],
)  # fmt: skip
def test_loopback_detection(host, expected):
    assert is_loopback(host) is expected


def test_engine_errors_map_to_http_statuses():
    assert from_engine_error(RequestValidationError("max_tokens", "too big")).status_code == 400
    full = from_engine_error(AdmissionError("queue_full", retry_after_seconds=2.2))
    assert (full.status_code, full.headers["Retry-After"]) == (429, "3")
    assert from_engine_error(AdmissionError("draining")).status_code == 503
    assert from_engine_error(EngineDeadError("gone")).status_code == 503
    body = APIError.invalid("top_p", "must be > 0").to_dict()
    assert body == {
        "error": {
            "message": "top_p: must be > 0",
            "type": "invalid_request_error",
            "param": "top_p",
            "code": "invalid_value",
        }
    }


def _metrics() -> ServerMetrics:
    stats = EngineStats(
        num_preemptions_total=2,
        num_rejected_total_by_reason={"queue_full": 3},
        num_running_by_class={"interactive": 1},
        num_kv_blocks_used=5,
        num_kv_blocks_cached=3,
        num_kv_blocks_total=10,
        kv_usage_ratio=0.5,
        num_prefix_cache_queries_total=40,
        num_prefix_cache_hits_total=16,
    )
    metrics = ServerMetrics(
        stats_fn=lambda: stats,
        memory_fn=lambda: {"device_memory_peak_bytes": 123},
        info_fn=lambda: {"model": "tiny", "policy": "dynamic", "device": "cpu", "version": "t"},
    )
    metrics.observe_step(
        StepRecord(seq=1, start_time=0.0, wall_time=0.0, duration_seconds=0.0004,
                   forward_seconds=0.0003, policy="dynamic", num_seqs=3, num_prefill_tokens=10,
                   num_decode_tokens=2, num_kv_blocks_used=5, num_kv_blocks_total=10,
                   num_preemptions=0, num_recomputed_tokens=0, num_waiting={}, num_running={})
    )  # fmt: skip
    metrics.observe_request(
        priority="batch", ttft_seconds=0.2, inter_token_seconds=[0.01, 0.02], e2e_seconds=1.0,
        queue_seconds=0.05,
    )  # fmt: skip
    metrics.count_rejection("queue_full")
    metrics.count_rejection("invalid_request")
    return metrics


def test_metrics_text_parses_and_carries_every_binding_name_with_its_type():
    families = {f.name: f for f in text_string_to_metric_families(_metrics().render().decode())}
    for kind, names in BINDING_METRICS.items():
        for name in names:
            assert name in families, name
            assert families[name].type == kind, name


def test_metrics_values_come_from_stats_observations_and_http_rejections():
    from server_testlib import metric

    text = _metrics().render().decode()
    assert metric(text, "batchgate_preemptions_total") == 2
    assert metric(text, "batchgate_requests_rejected_total", reason="queue_full") == 4
    assert metric(text, "batchgate_requests_rejected_total", reason="invalid_request") == 1
    assert metric(text, "batchgate_num_requests_running", priority="interactive") == 1
    assert metric(text, "batchgate_num_requests_running", priority="batch") == 0
    assert metric(text, "batchgate_device_memory_peak_bytes") == 123
    assert metric(text, "batchgate_kv_blocks_cached") == 3
    assert metric(text, "batchgate_prefix_cache_queries_total") == 40
    assert metric(text, "batchgate_prefix_cache_hits_total") == 16
    assert metric(text, "batchgate_step_duration_seconds_bucket", le="0.0005") == 1
    assert metric(text, "batchgate_step_duration_seconds_bucket", le="0.00025") == 0
    assert metric(text, "batchgate_step_num_tokens_sum") == 12
    assert metric(text, "batchgate_inter_token_seconds_count", priority="batch") == 2
    assert metric(text, "batchgate_ttft_seconds_count", priority="interactive") == 0
    info = dict(model="tiny", policy="dynamic", device="cpu", version="t")
    assert metric(text, "batchgate_info", **info) == 1


def test_step_duration_buckets_resolve_sub_millisecond_steps():
    text = _metrics().render().decode()
    bounds = [
        float(s.labels["le"])
        for f in text_string_to_metric_families(text)
        if f.name == "batchgate_step_duration_seconds"
        for s in f.samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert len(bounds) >= 20
    assert sum(1 for b in bounds if b <= 0.001) >= 4
    assert sum(1 for b in bounds if 0.001 < b <= 0.01) >= 4


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH")
def test_metrics_pass_promtool_check():
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=_metrics().render(), capture_output=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _leaf_fields(cls: type, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    names = []
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            names += _leaf_fields(kind, f"{prefix}{field.name}.")
        else:
            names.append(prefix + field.name)
    return names


def test_every_config_field_has_exactly_one_flag():
    flags = engine_flags()
    engine_paths = {".".join(f.path) for f in flags if f.target == "engine"}
    server_paths = {".".join(f.path) for f in flags if f.target == "server"}
    assert engine_paths == set(_leaf_fields(EngineConfig))
    assert server_paths == set(_leaf_fields(ServerConfig))
    options = {f.option for f in flags}
    required = {
        "--policy", "--max-num-seqs", "--model", "--host", "--port", "--port-file", "--api-key",
        "--admin-token", "--max-body-bytes", "--drain-timeout-seconds", "--log-level",
        "--interactive-max-wait-ms", "--batch-max-waiting",
    }  # fmt: skip
    assert required <= options


def test_flags_build_nested_validated_configs():
    engine, server = parse_configs(
        ["--policy", "dynamic", "--max-num-seqs", "8", "--interactive-max-wait-ms", "5",
         "--batch-dispatch-threshold", "4", "--interactive-dispatch-threshold", "none",
         "--shared-queue", "--kv-cache-memory-bytes", "1048576", "--port", "0",
         "--api-key", "k", "--embedding-dispatch-threshold", "none"]
    )  # fmt: skip
    assert engine.batching.policy == "dynamic"
    assert engine.batching.max_num_seqs == 8
    assert engine.batching.interactive == ClassConfig(max_wait_ms=5.0)
    assert engine.batching.batch.dispatch_threshold == 4
    assert engine.batching.shared_queue is True
    assert engine.kv_cache_memory_bytes == 1048576
    assert (server.port, server.api_key, server.embedding_dispatch_threshold) == (0, "k", None)
    defaults_engine, defaults_server = parse_configs([])
    assert defaults_engine == EngineConfig() and defaults_engine.batching == BatchingConfig()
    assert defaults_engine.batching.enable_prefix_caching is True
    # vLLM's spelling, and the one a gate preset's bool key becomes (`no_` + key for false).
    assert parse_configs(["--no-enable-prefix-caching"])[0].batching.enable_prefix_caching is False
    assert parse_configs(["--enable-prefix-caching"])[0].batching.enable_prefix_caching is True
    assert defaults_server == ServerConfig()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--max-num-seqs", "0"], "--max-num-seqs"), (["--max-num-seqs", "x"], "--max-num-seqs"),
     (["--policy", "greedy"], "--policy"), (["--port", "70000"], "--port"),
     (["--interactive-max-wait-ms", "-1"], "--interactive-max-wait-ms"),
     (["--log-level", "loud"], "--log-level"), (["--bogus"], "--bogus")],
)  # fmt: skip
def test_invalid_flags_exit_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as caught:
        parse_configs(argv)
    assert caught.value.code == 2
    assert flag in capsys.readouterr().err


def test_help_explains_units_and_defaults():
    parser, _ = build_parser()
    text = " ".join(parser.format_help().split())
    assert "milliseconds" in text and "bytes" in text and "seconds" in text
    assert "(default: continuous)" in text and "(default: 127.0.0.1)" in text


def test_help_runs_without_building_an_engine():
    result = subprocess.run(
        [sys.executable, "-m", "reference_server", "--help"], capture_output=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0
    assert b"--max-num-seqs" in result.stdout


def test_server_config_refuses_bad_values_and_unknown_keys():
    with pytest.raises(ServerConfigError, match="max_body_bytes"):
        ServerConfig(max_body_bytes=0)
    with pytest.raises(ServerConfigError, match="nope"):
        ServerConfig.from_dict({"nope": 1})


def test_docs_list_every_flag_and_every_metric():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "server.md").read_text()
    for flag in engine_flags():
        assert f"`{flag.option}" in text, flag.option
    for names in BINDING_METRICS.values():
        for name in names:
            assert f"`{name}" in text, name


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_prerendered_content_chunks_equal_the_plain_encoding(endpoint, include_usage):
    import orjson

    from reference_server.api.generation import ResponseShapes
    from reference_server.api.protocol import GenerationRequest
    from reference_server.sampling_params import SamplingParams

    request = GenerationRequest(
        endpoint=endpoint, model=None, prompt_token_ids=[1], params=SamplingParams(),
        stream=True, include_usage=include_usage, priority="interactive",
    )  # fmt: skip
    shapes = ResponseShapes(request, 'mo"del')
    for text in ["a", 'quote " and \\ back', "é\u2028\x00\ufffd", ""]:
        chunk = shapes.content_chunk(text)
        payload = orjson.loads(chunk[len(b"data: ") : -2])
        choice = payload["choices"][0]
        assert (choice["delta"]["content"] if endpoint == "chat" else choice["text"]) == text
        assert chunk == sse_event(payload)
        assert ("usage" in payload) is include_usage


def test_request_timer_spreads_an_answer_delivered_at_once_over_its_tokens():
    from types import SimpleNamespace

    from reference_server.api.generation import RequestTimer

    seen = {}

    class Metrics:
        def observe_request(self, **kwargs):
            seen.update(kwargs)

    timer = RequestTimer(Metrics(), "batch")  # type: ignore[arg-type]
    import time as clock

    now = clock.monotonic()
    timer.on_output(SimpleNamespace(
        arrival_time=now - 1.0, first_scheduled_time=now - 0.9, first_token_time=now - 0.8,
        new_token_ids=[1, 2, 3, 4, 5], finished=True, finish_reason="length",
    ))  # fmt: skip
    timer.report()
    assert seen["ttft_seconds"] == pytest.approx(0.2)
    # Five tokens, the last at delivery: four gaps of ~0.8 / 4 s, not four zero gaps.
    assert len(seen["inter_token_seconds"]) == 4
    assert all(g == pytest.approx(0.2, abs=0.05) for g in seen["inter_token_seconds"])
    assert seen["e2e_seconds"] == pytest.approx(1.0, abs=0.05)
