"""Each server's Prometheus names for batchgate's glossary metrics, as data.

Owns the per-server tables (bundled server, vLLM, SGLang, TGI, llama.cpp, unknown): for every
glossary name, the metric names tried in order, the shape of their series, and — where a server
cannot give it — an explicit "not exposed" with the reason (never a zero). The units, the
sources of these names and the detection / mapping code are in `gate.observers.namemaps`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

__all__ = ["NAME_MAPS", "PRIORITY_LABEL", "MetricSource", "Shape", "not_exposed"]

PRIORITY_LABEL = "priority"

Shape = Literal[
    "value", "by_priority", "histogram", "histogram_sum", "sum_all", "sum_any", "info_label"
]


@dataclasses.dataclass(frozen=True)
class MetricSource:
    """Where one glossary metric comes from on one kind of server.

    `names` are base names tried in order (current before legacy); the first one present wins.
    An empty `names` means the server does not expose the metric at all; `note` says why.
    `shape`: `value` (label sets combined by `combine`), `by_priority` ({class: value} when the
    series carry a `priority` label, else a value), `histogram` (cumulative buckets merged over
    label sets), `histogram_sum` (the `_sum` of a histogram, e.g. TGI's token totals),
    `sum_all` (the sum of every name; unavailable unless all are present), `sum_any` (the sum
    of the names present), `info_label` (the number in label `label` of an info gauge, summed
    over its series, e.g. vLLM's `num_gpu_blocks`).
    """

    names: tuple[str, ...]
    shape: Shape = "value"
    combine: Literal["sum", "max"] = "sum"
    label: str | None = None
    note: str | None = None

    @property
    def exposed(self) -> bool:
        return bool(self.names)


def _m(*names: str, **kw: Any) -> MetricSource:
    return MetricSource(names=names, **kw)


def not_exposed(reason: str) -> MetricSource:
    """An explicit "this server cannot give this metric": unavailable, never zero."""
    return MetricSource(names=(), note=reason)


_PROCESS_RSS = _m("process_resident_memory_bytes")
# Servers with hit and query counters: the hit ratio comes from them, exact over any window.
_COUNTED_HITS = not_exposed("counted exactly by prefix_cache_hits_total / queries_total instead")
_NO_DEVICE_MEMORY = not_exposed(
    "no device-memory gauge on /metrics; the device-memory sampler (gpu.jsonl) measures it"
)
_NO_PROCESS_RSS = not_exposed("no process collector on /metrics")

NAME_MAPS: dict[str, dict[str, MetricSource]] = {
    "batchgate": {
        "num_requests_running": _m("batchgate_num_requests_running", shape="by_priority"),
        "num_requests_waiting": _m("batchgate_num_requests_waiting", shape="by_priority"),
        "kv_usage_ratio": _m("batchgate_kv_usage_ratio", combine="max"),
        "kv_blocks_used": _m("batchgate_kv_blocks_used"),
        "kv_blocks_total": _m("batchgate_kv_blocks_capacity"),
        "preemptions_total": _m("batchgate_preemptions_total"),
        "recomputed_tokens_total": _m("batchgate_recomputed_tokens_total"),
        "prefill_tokens_total": _m("batchgate_prefill_tokens_total"),
        "prompt_tokens_total": _m("batchgate_prompt_tokens_total"),
        "generation_tokens_total": _m("batchgate_generation_tokens_total"),
        "requests_finished_total": _m("batchgate_requests_finished_total"),
        "step_duration_seconds": _m("batchgate_step_duration_seconds", shape="histogram"),
        "ttft_seconds": _m("batchgate_ttft_seconds", shape="histogram"),
        # Reserved, not allocated: the caching allocator's footprint is what the device sees.
        "device_memory_used_bytes": _m("batchgate_device_memory_reserved_bytes"),
        "process_resident_memory_bytes": _PROCESS_RSS,
        "queue_time_seconds": _m("batchgate_queue_seconds", shape="histogram"),
        "inter_token_latency_seconds": _m("batchgate_inter_token_seconds", shape="histogram"),
        "step_tokens": _m("batchgate_step_num_tokens", shape="histogram"),
        "forward_duration_seconds": not_exposed(
            "the bundled server times whole steps (step_duration_seconds), not the forward alone"
        ),
        "prefix_cache_queries_total": _m("batchgate_prefix_cache_queries_total"),
        "prefix_cache_hits_total": _m("batchgate_prefix_cache_hits_total"),
        "prefix_cache_hit_rate": _COUNTED_HITS,
        # The rejected counter has no series until a first rejection; aborted always has one.
        "requests_failed_total": _m(
            "batchgate_requests_rejected_total",
            "batchgate_requests_aborted_total",
            shape="sum_any",
        ),
    },
    "vllm": {
        "num_requests_running": _m("vllm:num_requests_running"),
        "num_requests_waiting": _m("vllm:num_requests_waiting"),
        # kv_cache_usage_perc replaced gpu_cache_usage_perc (0.9); both are 0..1.
        "kv_usage_ratio": _m(
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", combine="max"
        ),
        "kv_blocks_used": not_exposed(
            "vLLM exports KV usage only as a ratio (free prefix-cache blocks count as free), "
            "no block count: no KV-leak-after-drain check"
        ),
        # Info gauge: value 1, the pool size is the `num_gpu_blocks` label (one series per
        # engine under data parallelism, hence the sum).
        "kv_blocks_total": _m("vllm:cache_config_info", shape="info_label", label="num_gpu_blocks"),
        "preemptions_total": _m("vllm:num_preemptions_total"),
        "recomputed_tokens_total": not_exposed(
            "vLLM counts preemptions but not the tokens recomputed after them"
        ),
        "prefill_tokens_total": not_exposed(
            "vllm:prompt_tokens_total counts each prompt once, not the prefill work redone "
            "after preemption; vLLM has no counter of prefill tokens computed"
        ),
        "prompt_tokens_total": _m("vllm:prompt_tokens_total"),
        "generation_tokens_total": _m("vllm:generation_tokens_total"),
        # Every finished_reason (stop, length, abort, ...) is summed.
        "requests_finished_total": _m("vllm:request_success_total"),
        "step_duration_seconds": not_exposed("vLLM has no per-step duration histogram"),
        "ttft_seconds": _m("vllm:time_to_first_token_seconds", shape="histogram"),
        "device_memory_used_bytes": _NO_DEVICE_MEMORY,
        # The API server process only (not the engine core); absent with --api-server-count > 1.
        "process_resident_memory_bytes": _PROCESS_RSS,
        "queue_time_seconds": _m("vllm:request_queue_time_seconds", shape="histogram"),
        # time_per_output_token_seconds is the deprecated (hidden) name of the same histogram.
        "inter_token_latency_seconds": _m(
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
            shape="histogram",
        ),
        # A histogram despite the `_total` in its name: prompt + generated tokens counted per
        # engine step (a prompt counts in the step that produces its first token).
        "step_tokens": _m("vllm:iteration_tokens_total", shape="histogram"),
        "forward_duration_seconds": not_exposed("vLLM exports no forward-pass timing"),
        "prefix_cache_queries_total": _m(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
        "prefix_cache_hits_total": _m(
            "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
        ),
        "prefix_cache_hit_rate": _COUNTED_HITS,
        "requests_failed_total": not_exposed(
            "vLLM counts no refused or failed requests on /metrics"
        ),
    },
    "sglang": {
        "num_requests_running": _m("sglang:num_running_reqs"),
        "num_requests_waiting": _m("sglang:num_queue_reqs"),
        # num_used_tokens / max_total_num_tokens, 0..1.
        "kv_usage_ratio": _m("sglang:token_usage", combine="max"),
        "kv_blocks_used": _m(
            "sglang:num_used_tokens",
            note="token slots; radix-cache tokens no request holds"
            " are not counted, so 0 after a drain unless KV leaked",
        ),
        "kv_blocks_total": _m("sglang:max_total_num_tokens", note="token slots"),
        # SGLang's preemption is retraction: a decoding request goes back to the queue.
        "preemptions_total": _m("sglang:num_retracted_requests_total"),
        "recomputed_tokens_total": not_exposed(
            "SGLang counts the tokens of retracted requests "
            "(sglang:num_retracted_input_tokens_total), not the tokens computed again"
        ),
        "prefill_tokens_total": not_exposed(
            "sglang:prompt_tokens_total counts prompt tokens of finished requests, not prefill "
            "work computed"
        ),
        "prompt_tokens_total": _m("sglang:prompt_tokens_total"),
        "generation_tokens_total": _m("sglang:generation_tokens_total"),
        "requests_finished_total": _m("sglang:num_requests_total"),
        "step_duration_seconds": not_exposed("SGLang has no per-step duration histogram"),
        "ttft_seconds": _m("sglang:time_to_first_token_seconds", shape="histogram"),
        "device_memory_used_bytes": _NO_DEVICE_MEMORY,
        "process_resident_memory_bytes": not_exposed(
            "SGLang serves /metrics from prometheus_client's multiprocess collector, "
            "which has no process metrics"
        ),
        "queue_time_seconds": _m("sglang:queue_time_seconds", shape="histogram"),
        "inter_token_latency_seconds": _m(
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
            shape="histogram",
        ),
        "step_tokens": not_exposed("SGLang has no tokens-per-step histogram"),
        "forward_duration_seconds": not_exposed("SGLang has no forward-pass histogram"),
        "prefix_cache_queries_total": not_exposed(
            "SGLang exports a hit-rate gauge (sglang:cache_hit_rate), no query counter"
        ),
        "prefix_cache_hits_total": _m("sglang:cached_tokens_total"),
        "prefix_cache_hit_rate": _m("sglang:cache_hit_rate", combine="max"),
        "requests_failed_total": not_exposed(
            "SGLang counts aborted requests only (sglang:num_aborted_requests_total), not refusals"
        ),
    },
    "tgi": {
        "num_requests_running": _m("tgi_batch_current_size"),
        "num_requests_waiting": _m("tgi_queue_size"),
        "kv_usage_ratio": not_exposed("TGI exports no KV cache usage"),
        "kv_blocks_used": not_exposed("TGI exports no KV block count"),
        "kv_blocks_total": not_exposed("TGI exports no KV block count"),
        "preemptions_total": not_exposed("TGI exports no preemption counter"),
        "recomputed_tokens_total": not_exposed("TGI exports no recompute counter"),
        "prefill_tokens_total": not_exposed("TGI exports no prefill-token counter"),
        # Histogram of input length per validated request; its _sum is the token total.
        "prompt_tokens_total": _m("tgi_request_input_length", shape="histogram_sum"),
        "generation_tokens_total": _m("tgi_request_generated_tokens", shape="histogram_sum"),
        # `tgi_request_success` on the wire; the parser names a typed counter's sample `_total`.
        "requests_finished_total": _m("tgi_request_success_total"),
        "step_duration_seconds": _m(
            "tgi_batch_inference_duration",
            shape="histogram",
            note="TGI times each prefill or decode call of the router; closest to one step",
        ),
        "ttft_seconds": not_exposed("TGI has no time-to-first-token histogram"),
        "device_memory_used_bytes": _NO_DEVICE_MEMORY,
        "process_resident_memory_bytes": _NO_PROCESS_RSS,
        "queue_time_seconds": _m("tgi_request_queue_duration", shape="histogram"),
        "inter_token_latency_seconds": not_exposed(
            "tgi_request_mean_time_per_token_duration is a per-request mean, not token gaps"
        ),
        "step_tokens": not_exposed("TGI has no tokens-per-step histogram"),
        # The shard's forward pass alone, prefill and decode merged.
        "forward_duration_seconds": _m("tgi_batch_forward_duration", shape="histogram"),
        "prefix_cache_queries_total": not_exposed("TGI exports no prefix-cache counters"),
        "prefix_cache_hits_total": not_exposed("TGI exports no prefix-cache counters"),
        "prefix_cache_hit_rate": not_exposed("TGI exports no prefix-cache metrics"),
        # Summed over its `err` label (validation, overloaded, dropped, incomplete, ...).
        "requests_failed_total": _m("tgi_request_failure_total"),
    },
    "llamacpp": {
        "num_requests_running": _m("llamacpp:requests_processing"),
        "num_requests_waiting": _m("llamacpp:requests_deferred"),
        # Builds before ggml-org/llama.cpp#13660 only (used cells / n_ctx, 0..1).
        "kv_usage_ratio": _m("llamacpp:kv_cache_usage_ratio", combine="max"),
        "kv_blocks_used": not_exposed("llama.cpp exports no KV cell count"),
        "kv_blocks_total": not_exposed("llama.cpp exports no KV capacity (see /props n_ctx)"),
        "preemptions_total": not_exposed(
            "llama.cpp does not preempt (a request waits for a free slot) and has no counter"
        ),
        "recomputed_tokens_total": not_exposed("llama.cpp exports no recompute counter"),
        # Prompt tokens evaluated, cached ones excluded: the prefill work.
        "prefill_tokens_total": _m("llamacpp:prompt_tokens_total"),
        # Evaluated + reused from the cache; older builds lack the cached counter.
        "prompt_tokens_total": _m(
            "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", shape="sum_all"
        ),
        "generation_tokens_total": _m("llamacpp:tokens_predicted_total"),
        "requests_finished_total": not_exposed(
            "llama.cpp has no request counter (n_decode_total counts llama_decode calls)"
        ),
        "step_duration_seconds": not_exposed(
            "llama.cpp counts decode calls (n_decode_total) but exports no durations per call"
        ),
        "ttft_seconds": not_exposed("llama.cpp has no time-to-first-token histogram"),
        "device_memory_used_bytes": _NO_DEVICE_MEMORY,
        "process_resident_memory_bytes": _NO_PROCESS_RSS,
        "queue_time_seconds": not_exposed("llama.cpp has no queue-time histogram"),
        "inter_token_latency_seconds": not_exposed(
            "llama.cpp exports average throughput gauges, no inter-token histogram"
        ),
        "step_tokens": not_exposed("llama.cpp has no tokens-per-step histogram"),
        "forward_duration_seconds": not_exposed("llama.cpp has no forward-pass histogram"),
        "prefix_cache_queries_total": _m(
            "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", shape="sum_all"
        ),
        "prefix_cache_hits_total": _m("llamacpp:prompt_tokens_cached_total"),
        "prefix_cache_hit_rate": _COUNTED_HITS,
        "requests_failed_total": not_exposed("llama.cpp has no failed-request counter"),
    },
    "unknown": {"process_resident_memory_bytes": _PROCESS_RSS},
}
