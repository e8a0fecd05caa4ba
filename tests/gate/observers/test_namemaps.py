"""Name maps: each server's exposition maps to glossary names; missing means unavailable."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gate.observers.namemaps import GLOSSARY_NAMES, NAME_MAPS, detect_server_kind, map_metrics
from gate.observers.prom_scraper import parse_exposition

STEP_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.1, 1.0, 10.0)


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
    step = Histogram("batchgate_step_duration_seconds", "s", buckets=STEP_BUCKETS, registry=reg)
    for v in (0.0002, 0.0003, 0.002, 0.05):
        step.observe(v)
    ttft = Histogram("batchgate_ttft_seconds", "t", prio, buckets=(0.1, 1.0), registry=reg)
    ttft.labels("interactive").observe(0.05)
    ttft.labels("batch").observe(0.5)
    ttft.labels("batch").observe(5.0)
    return generate_latest(reg).decode()


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

VLLM_LEGACY = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.8
# TYPE vllm:num_preemptions counter
vllm:num_preemptions{model_name="m"} 3.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
"""

SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 8.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.28
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 8128902.0
"""

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_request_success counter
tgi_request_success 40
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="100"} 10
tgi_request_input_length_bucket{le="+Inf"} 40
tgi_request_input_length_sum 8000
tgi_request_input_length_count 40
# TYPE tgi_batch_inference_duration histogram
tgi_batch_inference_duration_bucket{method="prefill",le="0.01"} 1
tgi_batch_inference_duration_bucket{method="prefill",le="+Inf"} 4
tgi_batch_inference_duration_sum{method="prefill"} 0.3
tgi_batch_inference_duration_count{method="prefill"} 4
tgi_batch_inference_duration_bucket{method="decode",le="0.01"} 90
tgi_batch_inference_duration_bucket{method="decode",le="+Inf"} 100
tgi_batch_inference_duration_sum{method="decode"} 0.9
tgi_batch_inference_duration_count{method="decode"} 100
"""


def mapped(text: str, kind: str | None = None):
    samples = parse_exposition(text)
    return map_metrics(kind or detect_server_kind(samples), samples)


def test_bundled_server_maps_every_glossary_metric():
    text = batchgate_exposition()
    assert detect_server_kind(parse_exposition(text)) == "batchgate"
    metrics, unavailable = mapped(text)
    assert unavailable == []
    assert set(metrics) == set(GLOSSARY_NAMES)
    assert metrics["num_requests_running"] == {"batch": 5, "interactive": 3}
    assert metrics["num_requests_waiting"] == {"batch": 7, "interactive": 1}
    assert metrics["kv_usage_ratio"] == pytest.approx(0.42)
    assert metrics["preemptions_total"] == 4
    assert metrics["recomputed_tokens_total"] == 120
    assert metrics["requests_finished_total"] == 32
    assert metrics["device_memory_used_bytes"] == 2**30
    step = metrics["step_duration_seconds"]
    assert step["count"] == 4 and step["sum"] == pytest.approx(0.0525)
    assert step["buckets"]["0.0005"] == 2 and step["buckets"]["0.005"] == 3
    assert step["buckets"]["+Inf"] == 4
    assert next(iter(step["buckets"])) == "0.0001"


def test_histogram_series_are_merged_over_label_sets():
    metrics, _ = mapped(batchgate_exposition())
    ttft = metrics["ttft_seconds"]
    assert ttft["buckets"] == {"0.1": 1, "1.0": 2, "+Inf": 3}
    assert ttft["count"] == 3 and ttft["sum"] == pytest.approx(5.55)


def test_vllm_current_names_map_and_missing_ones_are_unavailable_not_zero():
    metrics, unavailable = mapped(VLLM_CURRENT)
    assert metrics["num_requests_running"] == 4
    assert metrics["num_requests_waiting"] == 2
    assert metrics["kv_usage_ratio"] == pytest.approx(0.37)
    assert metrics["preemptions_total"] == 6
    assert metrics["prompt_tokens_total"] == 900
    assert metrics["generation_tokens_total"] == 4000
    assert metrics["requests_finished_total"] == 15
    assert metrics["ttft_seconds"]["buckets"] == {"0.1": 3, "1.0": 9, "+Inf": 10}
    assert metrics["process_resident_memory_bytes"] == 1.5e9
    for name in ("kv_blocks_used", "recomputed_tokens_total", "step_duration_seconds"):
        assert name in unavailable and name not in metrics
    assert set(metrics) | set(unavailable) == set(GLOSSARY_NAMES)


def test_vllm_legacy_names_still_map():
    samples = parse_exposition(VLLM_LEGACY)
    assert detect_server_kind(samples) == "vllm"
    metrics, _ = map_metrics("vllm", samples)
    assert metrics["kv_usage_ratio"] == pytest.approx(0.8)
    assert metrics["preemptions_total"] == 3


def test_sglang_names_map():
    metrics, unavailable = mapped(SGLANG)
    assert metrics == {
        "num_requests_running": 8,
        "num_requests_waiting": 3,
        "kv_usage_ratio": pytest.approx(0.28),
        "prompt_tokens_total": 8128902,
    }
    assert "generation_tokens_total" in unavailable


def test_tgi_names_map_including_histogram_sums():
    metrics, _ = mapped(TGI)
    assert metrics["num_requests_waiting"] == 4
    assert metrics["num_requests_running"] == 12
    assert metrics["requests_finished_total"] == 40
    assert metrics["prompt_tokens_total"] == 8000
    assert metrics["step_duration_seconds"]["buckets"] == {"0.01": 91, "+Inf": 104}


def test_nan_gauge_is_unavailable():
    text = "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc NaN\n"
    metrics, unavailable = mapped(text)
    assert "kv_usage_ratio" in unavailable and "kv_usage_ratio" not in metrics


def test_kind_detection():
    assert detect_server_kind(["foo", "bar"]) == "unknown"
    assert detect_server_kind(["tgi_queue_size", "process_cpu_seconds_total"]) == "tgi"
    assert detect_server_kind(["sglang:token_usage"]) == "sglang"


def test_unknown_server_maps_only_generic_process_metrics():
    metrics, unavailable = mapped("process_resident_memory_bytes 10\nfoo_total 3\n")
    assert metrics == {"process_resident_memory_bytes": 10}
    assert len(unavailable) == len(GLOSSARY_NAMES) - 1


def test_every_map_uses_only_glossary_names():
    for kind, table in NAME_MAPS.items():
        assert set(table) <= set(GLOSSARY_NAMES), kind


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown server kind"):
        map_metrics("triton", {})
