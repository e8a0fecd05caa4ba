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

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gate.observers.server_maps import NAME_MAPS, PRIORITY_LABEL, MetricSource

__all__ = [
    "GLOSSARY_NAMES",
    "GLOSSARY_UNITS",
    "METRICLESS_KINDS",
    "SERVER_KINDS",
    "Samples",
    "detect_metricless_kind",
    "detect_server_kind",
    "map_metrics",
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
    "prefix_cache_hit_rate",
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
    "prefix_cache_hit_rate": ("gauge", "recent prefix-cache hit rate, 0..1 (SGLang's own)"),
    "requests_failed_total": ("counter", "requests refused, aborted or failed"),
}

SERVER_KINDS = ("batchgate", "vllm", "sglang", "tgi", "llamacpp", "unknown")

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


# Kinds of servers without /metrics, told apart by their /v1/models answer: Hugging Face
# `transformers serve` marks every model entry with its load state (`"status": {"value":
# "loaded"}`), which no other OpenAI-compatible server we know of does; the rest are `openai`.
METRICLESS_KINDS = ("openai", "transformers")


def detect_metricless_kind(models: object) -> str:
    """The kind of a server that serves no /metrics, from its /v1/models body."""
    data = models.get("data") if isinstance(models, dict) else None
    if (
        isinstance(data, list)
        and data
        and all(
            isinstance(entry, dict)
            and isinstance(entry.get("status"), dict)
            and entry["status"].get("value") in ("loaded", "unloaded")
            for entry in data
        )
    ):
        return "transformers"
    return "openai"


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
