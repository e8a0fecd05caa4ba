"""Name maps: each server kind's Prometheus names -> the glossary names of docs/records.md.

Owns the table of which sample names (current first, then legacy) feed each glossary metric for
the bundled server, vLLM, SGLang and TGI, how their label sets are combined, the detection of
the server kind from the names present, and the mapping of one parsed scrape. A metric the
target does not expose is returned in `unavailable`, never as zero. It does not fetch anything
and does not know about files or time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = [
    "GLOSSARY_NAMES",
    "NAME_MAPS",
    "SERVER_KINDS",
    "MetricSource",
    "Samples",
    "detect_server_kind",
    "map_metrics",
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
)

SERVER_KINDS = ("batchgate", "vllm", "sglang", "tgi", "unknown")

PRIORITY_LABEL = "priority"


@dataclasses.dataclass(frozen=True)
class MetricSource:
    """Where one glossary metric comes from on one kind of server.

    `names` are base names tried in order (current before legacy); the first one present wins.
    `shape`: `value` (label sets combined by `combine`), `by_priority` ({class: value} when the
    series carry a `priority` label, else a value), `histogram` (cumulative buckets merged over
    label sets), `histogram_sum` (the `_sum` of a histogram, e.g. TGI's token totals).
    """

    names: tuple[str, ...]
    shape: Literal["value", "by_priority", "histogram", "histogram_sum"] = "value"
    combine: Literal["sum", "max"] = "sum"
    note: str | None = None


def _m(*names: str, **kw: Any) -> MetricSource:
    return MetricSource(names=names, **kw)


_PROCESS_RSS = _m("process_resident_memory_bytes")

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
    },
    "vllm": {
        "num_requests_running": _m("vllm:num_requests_running"),
        "num_requests_waiting": _m("vllm:num_requests_waiting"),
        # kv_cache_usage_perc replaced gpu_cache_usage_perc (V1 engine); both are 0..1.
        "kv_usage_ratio": _m(
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", combine="max"
        ),
        "preemptions_total": _m("vllm:num_preemptions_total", "vllm:num_preemptions"),
        "prompt_tokens_total": _m("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
        "generation_tokens_total": _m("vllm:generation_tokens_total", "vllm:generation_tokens"),
        "requests_finished_total": _m("vllm:request_success_total", "vllm:request_success"),
        "ttft_seconds": _m("vllm:time_to_first_token_seconds", shape="histogram"),
        "process_resident_memory_bytes": _PROCESS_RSS,
    },
    "sglang": {
        "num_requests_running": _m("sglang:num_running_reqs"),
        "num_requests_waiting": _m("sglang:num_queue_reqs"),
        "kv_usage_ratio": _m("sglang:token_usage", combine="max"),
        "prompt_tokens_total": _m("sglang:prompt_tokens_total", "sglang:prompt_tokens"),
        "generation_tokens_total": _m("sglang:generation_tokens_total", "sglang:generation_tokens"),
        "requests_finished_total": _m("sglang:num_requests_total", "sglang:num_requests"),
        "ttft_seconds": _m("sglang:time_to_first_token_seconds", shape="histogram"),
        "process_resident_memory_bytes": _PROCESS_RSS,
    },
    "tgi": {
        "num_requests_running": _m("tgi_batch_current_size"),
        "num_requests_waiting": _m("tgi_queue_size"),
        "prompt_tokens_total": _m("tgi_request_input_length", shape="histogram_sum"),
        "generation_tokens_total": _m("tgi_request_generated_tokens", shape="histogram_sum"),
        "requests_finished_total": _m("tgi_request_success", "tgi_request_success_total"),
        "step_duration_seconds": _m(
            "tgi_batch_inference_duration",
            shape="histogram",
            note="TGI times each prefill or decode call of the router; closest to one step",
        ),
        "process_resident_memory_bytes": _PROCESS_RSS,
    },
    "unknown": {"process_resident_memory_bytes": _PROCESS_RSS},
}

_KIND_PREFIXES = (
    ("batchgate_", "batchgate"),
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("tgi_", "tgi"),
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
    for name in source.names:
        if source.shape == "histogram":
            value = _histogram(name, samples)
        elif source.shape == "histogram_sum":
            value = _combine(samples.get(f"{name}_sum"), "sum")
        elif source.shape == "by_priority":
            value = _by_priority(samples.get(name), source.combine)
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
