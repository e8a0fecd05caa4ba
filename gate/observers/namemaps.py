"""Name maps: each server kind's Prometheus names -> the glossary names of docs/records.md.

Owns the table of which sample names (current first, then legacy) feed each glossary metric for
the bundled server, vLLM, SGLang, TGI and llama.cpp, how their label sets are combined, the
detection of the server kind from the names present, and the mapping of one parsed scrape. A
metric the target does not expose is returned in `unavailable`, never as zero; where a server
cannot give a glossary metric at all, its table says so with an explicit `not_exposed` entry
and the reason (see `unavailable_reason`). It does not fetch anything and does not know about
files or time.

Units and types of the glossary metrics are in `GLOSSARY_UNITS`. Things to know per server
(checked against each server's own source; docs/observers.md has the full table):

- Counter samples always end in `_total` here: prometheus_client (vLLM, SGLang, the bundled
  server) writes them so, and its parser (gate.observers.prom_scraper.parse_exposition) names
  the sample of any `# TYPE x counter` family `x_total` even when the wire says `x`. So a bare
  counter name (`vllm:num_preemptions`) can never match and is not listed, and TGI's
  `tgi_request_success` (its Rust exporter adds no suffix on the wire) is looked up as
  `tgi_request_success_total`. llama.cpp names its counters `..._total` itself.
- Ratios are 0..1 everywhere: vLLM's `vllm:kv_cache_usage_perc` / `vllm:gpu_cache_usage_perc`
  ("1 means 100 percent usage") despite the name, SGLang's `sglang:token_usage`
  (used / max tokens) and old llama.cpp builds' `llamacpp:kv_cache_usage_ratio`.
- SGLang allocates KV per token slot, so its `kv_blocks_used` / `kv_blocks_total` are token
  slots (`sglang:num_used_tokens` / `sglang:max_total_num_tokens`), not pages of
  `page_size` tokens. `num_used_tokens` leaves out radix-cache tokens no request holds, so it
  is 0 after a drain unless KV leaked.
- `process_resident_memory_bytes` comes from prometheus_client's process collector. vLLM's
  single API server has it (the API server process only, not the engine core process);
  SGLang serves /metrics through the multiprocess collector (no process metrics); TGI and
  llama.cpp have none.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = [
    "GLOSSARY_NAMES",
    "GLOSSARY_UNITS",
    "NAME_MAPS",
    "SERVER_KINDS",
    "MetricSource",
    "Samples",
    "detect_server_kind",
    "map_metrics",
    "not_exposed",
    "unavailable_reason",
]

# name -> list of (labels, value), as parsed from one exposition.
Samples = Mapping[str, list[tuple[dict[str, str], float]]]

GLOSSARY_NAMES = (
    "num_requests_running",
    "num_requests_waiting",
    "kv_usage_ratio",
    "kv_blocks_used",
    "kv_blocks_total",
    "preemptions_total",
    "recomputed_tokens_total",
    "prefill_tokens_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_finished_total",
    "step_duration_seconds",
    "ttft_seconds",
    "device_memory_used_bytes",
    "process_resident_memory_bytes",
    "queue_time_seconds",
    "inter_token_latency_seconds",
    "step_tokens",
    "forward_duration_seconds",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "requests_failed_total",
)

# glossary name -> (type, unit and meaning). Counters are cumulative since server start: only
# differences between two scrapes mean anything. Gauges are instantaneous. Histograms are
# cumulative buckets (seconds or tokens, as said).
GLOSSARY_UNITS: dict[str, tuple[str, str]] = {
    "num_requests_running": ("gauge", "requests in the running batch"),
    "num_requests_waiting": ("gauge", "requests queued, not yet scheduled"),
    "kv_usage_ratio": ("gauge", "KV cache in use / capacity, 0..1 (never percent)"),
    "kv_blocks_used": ("gauge", "KV blocks held by requests (SGLang: token slots)"),
    "kv_blocks_total": ("gauge", "KV blocks in the pool (SGLang: token slots)"),
    "preemptions_total": ("counter", "requests preempted / retracted back to the queue"),
    "recomputed_tokens_total": ("counter", "tokens computed again after a preemption"),
    "prefill_tokens_total": ("counter", "prefill tokens actually computed (incl. recompute)"),
    "prompt_tokens_total": ("counter", "prompt tokens of requests, each counted once"),
    "generation_tokens_total": ("counter", "output tokens generated"),
    "requests_finished_total": ("counter", "requests that finished"),
    "step_duration_seconds": ("histogram", "seconds per engine step (one batch iteration)"),
    "ttft_seconds": ("histogram", "seconds from arrival to first token, server side"),
    "device_memory_used_bytes": ("gauge", "device memory held by the server, bytes"),
    "process_resident_memory_bytes": ("gauge", "resident memory of the scraped process, bytes"),
    "queue_time_seconds": ("histogram", "seconds a request waited before being scheduled"),
    "inter_token_latency_seconds": ("histogram", "seconds between consecutive output tokens"),
    "step_tokens": ("histogram", "tokens per engine step"),
    "forward_duration_seconds": ("histogram", "seconds of the model forward pass per batch"),
    "prefix_cache_queries_total": ("counter", "prompt tokens looked up in the prefix cache"),
    "prefix_cache_hits_total": ("counter", "prompt tokens found in the prefix cache"),
    "requests_failed_total": ("counter", "requests refused, aborted or failed"),
}

SERVER_KINDS = ("batchgate", "vllm", "sglang", "tgi", "llamacpp", "unknown")

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
        "prefix_cache_queries_total": not_exposed("the bundled server has no prefix cache"),
        "prefix_cache_hits_total": not_exposed("the bundled server has no prefix cache"),
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
        "requests_failed_total": not_exposed("llama.cpp has no failed-request counter"),
    },
    "unknown": {"process_resident_memory_bytes": _PROCESS_RSS},
}

_KIND_PREFIXES = (
    ("batchgate_", "batchgate"),
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("tgi_", "tgi"),
    ("llamacpp:", "llamacpp"),
)


def detect_server_kind(names: Iterable[str]) -> str:
    """The kind whose prefix most sample names carry; `unknown` when none does."""
    counts = dict.fromkeys(SERVER_KINDS, 0)
    for name in names:
        for prefix, kind in _KIND_PREFIXES:
            if name.startswith(prefix):
                counts[kind] += 1
                break
    best = max(_KIND_PREFIXES, key=lambda pk: counts[pk[1]])[1]
    return best if counts[best] else "unknown"


def unavailable_reason(kind: str, glossary_name: str) -> str | None:
    """Why `kind` cannot give `glossary_name` at all; None when it has a source for it."""
    if kind not in NAME_MAPS:
        raise ValueError(f"unknown server kind {kind!r}; known: {', '.join(SERVER_KINDS)}")
    source = NAME_MAPS[kind].get(glossary_name)
    if source is None:
        return f"no name map for {glossary_name} on a {kind} server"
    if not source.exposed:
        return source.note or f"a {kind} server does not expose {glossary_name}"
    return None


def map_metrics(kind: str, samples: Samples) -> tuple[dict[str, Any], list[str]]:
    """Maps one parsed exposition to ({glossary name: value}, [unavailable glossary names])."""
    if kind not in NAME_MAPS:
        raise ValueError(f"unknown server kind {kind!r}; known: {', '.join(SERVER_KINDS)}")
    table = NAME_MAPS[kind]
    metrics: dict[str, Any] = {}
    unavailable: list[str] = []
    for glossary_name in GLOSSARY_NAMES:
        source = table.get(glossary_name)
        value = _resolve(source, samples) if source is not None else None
        if value is None:
            unavailable.append(glossary_name)
        else:
            metrics[glossary_name] = value
    return metrics, unavailable


def _resolve(source: MetricSource, samples: Samples) -> Any:
    if source.shape in ("sum_all", "sum_any"):
        parts = [_combine(samples.get(name), "sum") for name in source.names]
        present = [p for p in parts if p is not None]
        if not present or (source.shape == "sum_all" and len(present) < len(parts)):
            return None
        return _int_if_whole(math.fsum(present))
    for name in source.names:
        if source.shape == "histogram":
            value = _histogram(name, samples)
        elif source.shape == "histogram_sum":
            value = _combine(samples.get(f"{name}_sum"), "sum")
        elif source.shape == "by_priority":
            value = _by_priority(samples.get(name), source.combine)
        elif source.shape == "info_label":
            value = _info_label(samples.get(name), source.label or "")
        else:
            value = _combine(samples.get(name), source.combine)
        if value is not None:
            return value
    return None


def _finite(values: Iterable[float]) -> list[float]:
    # NaN is how a gauge says "no value"; it must not become a number in the record.
    return [v for v in values if not math.isnan(v)]


def _combine(series: list[tuple[dict[str, str], float]] | None, how: str) -> float | None:
    if not series:
        return None
    values = _finite(v for _, v in series)
    if not values:
        return None
    return max(values) if how == "max" else math.fsum(values)


def _info_label(series: list[tuple[dict[str, str], float]] | None, label: str) -> float | None:
    """Sum of a numeric label over the series of an info gauge; None if any is not a number
    (vLLM writes `None` before the KV cache is sized)."""
    if not series:
        return None
    values = []
    for labels, _ in series:
        try:
            value = float(labels[label])
        except (KeyError, ValueError):
            return None
        if math.isnan(value):
            return None
        values.append(value)
    return _int_if_whole(math.fsum(values))


def _by_priority(
    series: list[tuple[dict[str, str], float]] | None, how: str
) -> float | dict[str, float] | None:
    if not series:
        return None
    if not any(PRIORITY_LABEL in labels for labels, _ in series):
        return _combine(series, how)
    out: dict[str, list[float]] = {}
    for labels, value in series:
        if not math.isnan(value):
            out.setdefault(labels.get(PRIORITY_LABEL, "unlabelled"), []).append(value)
    if not out:
        return None
    return {cls: (max(v) if how == "max" else math.fsum(v)) for cls, v in sorted(out.items())}


def _le_key(le: str) -> str:
    bound = float(le)
    return "+Inf" if math.isinf(bound) else repr(bound)


def _histogram(name: str, samples: Samples) -> dict[str, Any] | None:
    """Cumulative buckets summed over every label set (bucket bounds agree within a family)."""
    buckets_series = samples.get(f"{name}_bucket")
    if not buckets_series:
        return None
    merged: dict[float, float] = {}
    for labels, value in buckets_series:
        le = labels.get("le")
        if le is None or math.isnan(value):
            continue
        bound = float(le)
        merged[bound] = merged.get(bound, 0.0) + value
    if not merged:
        return None
    total_sum = _combine(samples.get(f"{name}_sum"), "sum")
    count = _combine(samples.get(f"{name}_count"), "sum")
    if count is None:
        count = merged.get(math.inf)
    return {
        "buckets": {_le_key(str(b)): _int_if_whole(merged[b]) for b in sorted(merged)},
        "sum": total_sum,
        "count": _int_if_whole(count) if count is not None else None,
    }


def _int_if_whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value
