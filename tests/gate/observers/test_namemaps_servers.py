"""Name maps of SGLang, TGI and llama.cpp read on those servers' own exposition text
(fixtures/, each saying where its names come from)."""

from __future__ import annotations

import pytest
from test_namemaps import fixture, mapped


def test_sglang_documented_sample_maps():
    metrics, unavailable = mapped(fixture("sglang-docs-sample.txt"))
    assert metrics["num_requests_running"] == 162
    assert metrics["num_requests_waiting"] == 2826
    assert metrics["kv_usage_ratio"] == pytest.approx(0.28)
    assert metrics["kv_blocks_used"] == 123859
    assert metrics["prompt_tokens_total"] == 8128902
    assert metrics["generation_tokens_total"] == 7557572
    assert metrics["ttft_seconds"]["count"] == 11008
    assert metrics["ttft_seconds"]["buckets"]["1.0"] == 27
    # The sample predates inter_token_latency_seconds: its old name feeds the same metric.
    assert metrics["inter_token_latency_seconds"]["count"] == 7400757
    for name in ("kv_blocks_total", "preemptions_total", "requests_finished_total"):
        assert name in unavailable  # not in this older sample, so no data (not zero)


def test_sglang_collector_names_map():
    metrics, _ = mapped(fixture("sglang-collector-names.txt"))
    assert metrics["kv_blocks_used"] == 30000  # token slots
    assert metrics["kv_blocks_total"] == 120000
    assert metrics["kv_usage_ratio"] == pytest.approx(0.25)
    assert metrics["preemptions_total"] == 7  # retractions, not the num_retracted_reqs gauge
    assert metrics["requests_finished_total"] == 40
    assert metrics["prefix_cache_hits_total"] == 2000
    assert metrics["queue_time_seconds"]["buckets"] == {"0.0": 2, "0.1": 30, "1.0": 39, "+Inf": 40}
    assert metrics["inter_token_latency_seconds"]["count"] == 7960


def test_tgi_names_map_including_typed_counters_and_histogram_sums():
    metrics, _ = mapped(fixture("tgi-metrics.txt"))
    assert metrics["num_requests_waiting"] == 4
    assert metrics["num_requests_running"] == 12
    # `tgi_request_success 40` on the wire, a typed counter: parsed as ..._total.
    assert metrics["requests_finished_total"] == 40
    assert metrics["requests_failed_total"] == 4  # summed over err
    assert metrics["prompt_tokens_total"] == 8000
    assert metrics["generation_tokens_total"] == 3600
    assert metrics["step_duration_seconds"]["buckets"] == {"0.01": 91, "+Inf": 104}
    assert metrics["forward_duration_seconds"]["buckets"] == {"0.01": 97, "+Inf": 104}
    assert metrics["forward_duration_seconds"]["sum"] == pytest.approx(0.9)
    assert metrics["queue_time_seconds"]["count"] == 40


def test_llamacpp_capture_maps():
    metrics, unavailable = mapped(fixture("llamacpp-metrics.txt"))
    assert metrics == {
        "num_requests_running": 0,
        "num_requests_waiting": 0,
        "prefill_tokens_total": 181,  # evaluated, cached excluded
        "prompt_tokens_total": 283,  # 181 evaluated + 102 reused
        "generation_tokens_total": 4020,
        "prefix_cache_queries_total": 283,
        "prefix_cache_hits_total": 102,
    }
    assert "preemptions_total" in unavailable and "recomputed_tokens_total" in unavailable


def test_llamacpp_without_cache_counter_has_no_prompt_total():
    text = "\n".join(
        line
        for line in fixture("llamacpp-metrics.txt").splitlines()
        if "prompt_tokens_cached_total" not in line
    )
    metrics, unavailable = mapped(text)
    assert metrics["prefill_tokens_total"] == 181
    for name in ("prompt_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total"):
        assert name in unavailable


def test_llamacpp_old_kv_ratio_maps():
    text = "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n"
    assert mapped(text)[0]["kv_usage_ratio"] == pytest.approx(0.25)
