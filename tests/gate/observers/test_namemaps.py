"""Name maps: each server's exposition maps to glossary names; missing means unavailable.

The vLLM, SGLang, TGI and llama.cpp expositions are fixtures under fixtures/, each opening with
a comment that says where its names come from (the server's own source, docs or a capture).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gate.observers.namemaps import (
    GLOSSARY_NAMES,
    GLOSSARY_UNITS,
    SERVER_KINDS,
    detect_server_kind,
    map_metrics,
    unavailable_reason,
)
from gate.observers.prom_scraper import parse_exposition
from gate.observers.server_maps import NAME_MAPS

FIXTURES = Path(__file__).parent / "fixtures"
STEP_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.1, 1.0, 10.0)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def batchgate_exposition() -> str:
    """The bundled server's binding names, produced by prometheus_client itself."""
    reg = CollectorRegistry()
    prio = ["priority"]
    running = Gauge("batchgate_num_requests_running", "r", prio, registry=reg)
    waiting = Gauge("batchgate_num_requests_waiting", "w", prio, registry=reg)
    running.labels("interactive").set(3)
    running.labels("batch").set(5)
    waiting.labels("interactive").set(1)
    waiting.labels("batch").set(7)
    Gauge("batchgate_kv_blocks_used", "u", registry=reg).set(42)
    Gauge("batchgate_kv_blocks_capacity", "t", registry=reg).set(100)
    Gauge("batchgate_kv_usage_ratio", "k", registry=reg).set(0.42)
    Counter("batchgate_prefix_cache_queries", "q", registry=reg).inc(900)
    Counter("batchgate_prefix_cache_hits", "h", registry=reg).inc(300)
    Gauge("batchgate_device_memory_reserved_bytes", "d", registry=reg).set(2**30)
    Gauge("process_resident_memory_bytes", "rss", registry=reg).set(5e8)
    Counter("batchgate_preemptions_total", "p", registry=reg).inc(4)
    Counter("batchgate_recomputed_tokens_total", "r", registry=reg).inc(120)
    Counter("batchgate_prefill_tokens_total", "p", registry=reg).inc(1120)
    Counter("batchgate_prompt_tokens_total", "p", registry=reg).inc(1000)
    Counter("batchgate_generation_tokens_total", "g", registry=reg).inc(5000)
    finished = Counter("batchgate_requests_finished_total", "f", ["finish_reason"], registry=reg)
    finished.labels("length").inc(30)
    finished.labels("stop").inc(2)
    rejected = Counter("batchgate_requests_rejected_total", "x", ["reason"], registry=reg)
    rejected.labels("queue_full").inc(2)
    Counter("batchgate_requests_aborted_total", "a", registry=reg).inc(1)
    step = Histogram("batchgate_step_duration_seconds", "s", buckets=STEP_BUCKETS, registry=reg)
    for v in (0.0002, 0.0003, 0.002, 0.05):
        step.observe(v)
    tokens = Histogram("batchgate_step_num_tokens", "n", buckets=(8, 64), registry=reg)
    for v in (1, 10, 100):
        tokens.observe(v)
    ttft = Histogram("batchgate_ttft_seconds", "t", prio, buckets=(0.1, 1.0), registry=reg)
    ttft.labels("interactive").observe(0.05)
    ttft.labels("batch").observe(0.5)
    ttft.labels("batch").observe(5.0)
    queue = Histogram("batchgate_queue_seconds", "q", prio, buckets=(0.1,), registry=reg)
    queue.labels("batch").observe(0.2)
    itl = Histogram("batchgate_inter_token_seconds", "i", prio, buckets=(0.01,), registry=reg)
    itl.labels("interactive").observe(0.005)
    return generate_latest(reg).decode()


# Kept for test_prom_scraper: current vLLM names, no cache_config_info (so no kv_blocks_total).
VLLM_CURRENT = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.37
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 6.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 900.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 4000.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 10.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 5.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.2
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.5e9
"""

# Only the deprecated names vLLM still shows with --show-hidden-metrics-for-version.
VLLM_HIDDEN_ONLY = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.8
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 50.0
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 5.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 7.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 9.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.2
"""

FIXTURE_KINDS = {
    "vllm-metrics.txt": "vllm",
    "sglang-docs-sample.txt": "sglang",
    "sglang-collector-names.txt": "sglang",
    "tgi-metrics.txt": "tgi",
    "llamacpp-metrics.txt": "llamacpp",
}

# Bare counter names that prometheus_client never writes (it appends `_total`).
NEVER_MATCHING = {
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "sglang:prompt_tokens",
    "sglang:generation_tokens",
    "sglang:num_requests",
    "tgi_request_success",
}


def mapped(text: str, kind: str | None = None):
    samples = parse_exposition(text)
    return map_metrics(kind or detect_server_kind(samples), samples)


def names_used(kind: str) -> set[str]:
    return {name for source in NAME_MAPS[kind].values() for name in source.names}


def not_exposed_in(kind: str) -> set[str]:
    return {g for g, source in NAME_MAPS[kind].items() if not source.exposed}


@pytest.mark.parametrize(("name", "kind"), sorted(FIXTURE_KINDS.items()))
def test_each_fixture_says_where_its_names_come_from_and_is_detected(name, kind):
    text = fixture(name)
    first = text.splitlines()[0]
    assert first.startswith("# ") and not first.startswith(("# HELP", "# TYPE"))
    samples = parse_exposition(text)
    assert detect_server_kind(samples) == kind
    metrics, unavailable = map_metrics(kind, samples)
    assert set(metrics) | set(unavailable) == set(GLOSSARY_NAMES)
    assert not set(metrics) & set(unavailable)
    # What the server cannot give is unavailable whatever the scrape holds, never a number.
    assert not_exposed_in(kind) <= set(unavailable)


def test_bundled_server_maps_everything_but_what_it_does_not_have():
    text = batchgate_exposition()
    assert detect_server_kind(parse_exposition(text)) == "batchgate"
    metrics, unavailable = mapped(text)
    assert set(unavailable) == not_exposed_in("batchgate")
    assert set(unavailable) == {"forward_duration_seconds", "prefix_cache_hit_rate"}
    assert metrics["prefix_cache_queries_total"] == 900
    assert metrics["prefix_cache_hits_total"] == 300
    assert metrics["num_requests_running"] == {"batch": 5, "interactive": 3}
    assert metrics["num_requests_waiting"] == {"batch": 7, "interactive": 1}
    assert metrics["kv_usage_ratio"] == pytest.approx(0.42)
    assert metrics["preemptions_total"] == 4
    assert metrics["recomputed_tokens_total"] == 120
    assert metrics["requests_finished_total"] == 32
    assert metrics["requests_failed_total"] == 3
    assert metrics["device_memory_used_bytes"] == 2**30
    step = metrics["step_duration_seconds"]
    assert step["count"] == 4 and step["sum"] == pytest.approx(0.0525)
    assert step["buckets"]["0.0005"] == 2 and step["buckets"]["0.005"] == 3
    assert step["buckets"]["+Inf"] == 4
    assert next(iter(step["buckets"])) == "0.0001"
    assert metrics["step_tokens"]["buckets"] == {"8.0": 1, "64.0": 2, "+Inf": 3}
    assert metrics["queue_time_seconds"]["count"] == 1
    assert metrics["inter_token_latency_seconds"]["count"] == 1


def test_bundled_failed_requests_are_counted_before_any_rejection():
    reg = CollectorRegistry()
    Counter("batchgate_requests_rejected_total", "x", ["reason"], registry=reg)  # no series yet
    Counter("batchgate_requests_aborted_total", "a", registry=reg)
    metrics, _ = mapped(generate_latest(reg).decode(), "batchgate")
    assert metrics["requests_failed_total"] == 0


def test_histogram_series_are_merged_over_label_sets():
    metrics, _ = mapped(batchgate_exposition())
    ttft = metrics["ttft_seconds"]
    assert ttft["buckets"] == {"0.1": 1, "1.0": 2, "+Inf": 3}
    assert ttft["count"] == 3 and ttft["sum"] == pytest.approx(5.55)


def test_vllm_fixture_maps_each_metric_with_its_value():
    metrics, unavailable = mapped(fixture("vllm-metrics.txt"))
    assert metrics["num_requests_running"] == 4
    assert metrics["num_requests_waiting"] == 2
    assert metrics["kv_usage_ratio"] == pytest.approx(0.37)  # 0..1 despite "_perc"
    assert metrics["kv_blocks_total"] == 23456  # cache_config_info{num_gpu_blocks}
    assert metrics["preemptions_total"] == 6
    assert metrics["prompt_tokens_total"] == 900
    assert metrics["generation_tokens_total"] == 4000
    assert metrics["requests_finished_total"] == 15  # every finished_reason
    assert metrics["process_resident_memory_bytes"] == 1.5e9
    assert metrics["prefix_cache_queries_total"] == 1200
    assert metrics["prefix_cache_hits_total"] == 320
    assert "prefix_cache_hit_rate" in unavailable  # the counters give the exact ratio
    assert metrics["ttft_seconds"]["buckets"] == {"0.1": 3, "1.0": 9, "+Inf": 15}
    assert metrics["queue_time_seconds"]["buckets"] == {"0.3": 12, "1.0": 14, "+Inf": 15}
    assert metrics["queue_time_seconds"]["sum"] == pytest.approx(2.5)
    assert metrics["inter_token_latency_seconds"]["count"] == 3985
    # A histogram although its name ends in _total.
    assert metrics["step_tokens"]["count"] == 1000
    assert metrics["step_tokens"]["sum"] == 4900
    assert metrics["step_tokens"]["buckets"]["8.0"] == 900
    assert set(unavailable) == {
        "kv_blocks_used",
        "recomputed_tokens_total",
        "prefill_tokens_total",
        "step_duration_seconds",
        "device_memory_used_bytes",
        "forward_duration_seconds",
        "requests_failed_total",
        "prefix_cache_hit_rate",
    }


def test_sglang_has_no_query_counter_so_its_hit_rate_gauge_stands_in():
    samples = parse_exposition(
        "# TYPE sglang:cache_hit_rate gauge\n"
        'sglang:cache_hit_rate{model_name="m"} 0.25\n'
        "# TYPE sglang:cached_tokens counter\n"
        'sglang:cached_tokens_total{model_name="m"} 700\n'
    )
    metrics, unavailable = map_metrics("sglang", samples)
    assert metrics["prefix_cache_hit_rate"] == pytest.approx(0.25)
    assert metrics["prefix_cache_hits_total"] == 700
    assert "prefix_cache_queries_total" in unavailable


def test_vllm_cannot_give_recompute_or_kv_leak_and_says_why():
    for name in ("recomputed_tokens_total", "prefill_tokens_total", "kv_blocks_used"):
        reason = unavailable_reason("vllm", name)
        assert reason, name
    assert "ratio" in unavailable_reason("vllm", "kv_blocks_used")
    assert unavailable_reason("vllm", "preemptions_total") is None


def test_vllm_hidden_deprecated_names_still_map():
    samples = parse_exposition(VLLM_HIDDEN_ONLY)
    assert detect_server_kind(samples) == "vllm"
    metrics, _ = map_metrics("vllm", samples)
    assert metrics["kv_usage_ratio"] == pytest.approx(0.8)
    assert metrics["prefix_cache_queries_total"] == 50
    assert metrics["prefix_cache_hits_total"] == 5
    assert metrics["inter_token_latency_seconds"]["buckets"] == {"0.01": 7, "+Inf": 9}


def test_vllm_current_names_win_over_deprecated_ones():
    text = fixture("vllm-metrics.txt").replace(
        'vllm:gpu_cache_usage_perc{engine="0",model_name="TinyLlama/TinyLlama-1.1B-Chat-v1.0"}'
        " 0.37",
        'vllm:gpu_cache_usage_perc{engine="0",model_name="TinyLlama/TinyLlama-1.1B-Chat-v1.0"}'
        " 0.99",
    )
    metrics, _ = mapped(text)
    assert metrics["kv_usage_ratio"] == pytest.approx(0.37)


def test_vllm_kv_pool_size_sums_engines_and_needs_a_number():
    info = "# TYPE vllm:cache_config_info gauge\n"
    two = info + (
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="120"} 1.0\n'
    )
    assert mapped(two, "vllm")[0]["kv_blocks_total"] == 220
    unsized = info + 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    metrics, unavailable = mapped(unsized, "vllm")
    assert "kv_blocks_total" in unavailable and "kv_blocks_total" not in metrics


def test_vllm_minimal_exposition_still_maps():
    metrics, unavailable = mapped(VLLM_CURRENT)
    assert metrics["requests_finished_total"] == 15
    assert "kv_blocks_total" in unavailable


def test_never_matching_fallbacks_are_gone():
    for kind in NAME_MAPS:
        assert not names_used(kind) & NEVER_MATCHING, kind


def test_counter_sources_are_looked_up_with_the_total_suffix():
    for kind, table in NAME_MAPS.items():
        for glossary_name, source in table.items():
            if GLOSSARY_UNITS[glossary_name][0] != "counter" or source.shape == "histogram_sum":
                continue
            for name in source.names:
                assert name.endswith("_total"), (kind, glossary_name, name)


def test_bare_counter_names_never_appear_after_parsing():
    samples = parse_exposition(
        "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions 3\n"
        "# TYPE tgi_request_success counter\ntgi_request_success 2\n"
    )
    assert set(samples) == {"vllm:num_preemptions_total", "tgi_request_success_total"}


def test_unmapped_names_stay_unmapped():
    unmapped = {
        "vllm": {
            "vllm:e2e_request_latency_seconds",
            "vllm:request_prefill_time_seconds",
            "vllm:request_prompt_tokens",
            "vllm:request_params_n",
        },
        "sglang": {
            "sglang:func_latency_seconds",
            "sglang:gen_throughput",
            "sglang:num_retracted_reqs",
            "sglang:num_aborted_requests_total",
            "sglang:e2e_request_latency_seconds",
        },
        "tgi": {
            "tgi_request_duration",
            "tgi_request_mean_time_per_token_duration",
            "tgi_request_count_total",
            "tgi_batch_current_max_tokens",
        },
        "llamacpp": {
            "llamacpp:n_decode_total",
            "llamacpp:n_busy_slots_per_decode",
            "llamacpp:prompt_tokens_seconds",
            "llamacpp:n_tokens_max",
        },
    }
    for kind, names in unmapped.items():
        assert not names_used(kind) & names, kind
    metrics, _ = mapped(fixture("sglang-collector-names.txt"))
    assert set(metrics) <= set(GLOSSARY_NAMES)


@pytest.mark.parametrize("kind", ["sglang", "tgi", "llamacpp"])
def test_process_memory_is_not_taken_from_servers_without_a_process_collector(kind):
    name = next(f for f, k in FIXTURE_KINDS.items() if k == kind)
    text = fixture(name) + "# TYPE process_resident_memory_bytes gauge\n"
    text += "process_resident_memory_bytes 1e9\n"
    metrics, unavailable = mapped(text, kind)
    assert "process_resident_memory_bytes" in unavailable
    assert "process_resident_memory_bytes" not in metrics
    assert unavailable_reason(kind, "process_resident_memory_bytes")


def test_every_server_table_covers_the_whole_glossary():
    for kind in SERVER_KINDS:
        assert set(NAME_MAPS[kind]) <= set(GLOSSARY_NAMES), kind
        if kind != "unknown":
            assert set(NAME_MAPS[kind]) == set(GLOSSARY_NAMES), kind
    assert set(GLOSSARY_UNITS) == set(GLOSSARY_NAMES)
    assert unavailable_reason("unknown", "kv_usage_ratio")


def test_ratios_are_fractions_on_every_fixture():
    for name, kind in FIXTURE_KINDS.items():
        value = mapped(fixture(name), kind)[0].get("kv_usage_ratio")
        assert value is None or 0.0 <= value <= 1.0, name


def test_nan_gauge_is_unavailable():
    text = "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc NaN\n"
    metrics, unavailable = mapped(text)
    assert "kv_usage_ratio" in unavailable and "kv_usage_ratio" not in metrics


def test_kind_detection():
    assert detect_server_kind(["foo", "bar"]) == "unknown"
    assert detect_server_kind(["tgi_queue_size", "process_cpu_seconds_total"]) == "tgi"
    assert detect_server_kind(["sglang:token_usage"]) == "sglang"
    assert detect_server_kind(["llamacpp:requests_processing"]) == "llamacpp"


def test_unknown_server_maps_only_generic_process_metrics():
    metrics, unavailable = mapped("process_resident_memory_bytes 10\nfoo_total 3\n")
    assert metrics == {"process_resident_memory_bytes": 10}
    assert len(unavailable) == len(GLOSSARY_NAMES) - 1


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown server kind"):
        map_metrics("triton", {})
    with pytest.raises(ValueError, match="unknown server kind"):
        unavailable_reason("triton", "kv_usage_ratio")
