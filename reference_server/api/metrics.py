"""The server's Prometheus metrics: what is exposed on /metrics, under which names and units.

Owns one private `CollectorRegistry` per server: histograms fed by the engine's step listener,
by finished requests (server-side TTFT, inter-token, end-to-end and queue time per priority
class) and by the embeddings batcher; engine counters and gauges read from `EngineStats` at
scrape time; device memory from the model runner; process memory from prometheus_client's
process collector. It knows nothing about HTTP routing or how the numbers are produced.
docs/server.md lists every metric with its meaning and unit.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from reference_server.api.exposition import Exposition

__all__ = ["CONTENT_TYPE", "PRIORITY_CLASSES", "ServerMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PRIORITY_CLASSES = ("interactive", "batch")
PREFIX = "batchgate_"

# Fine at the low end: CPU steps of the tiny model take well under a millisecond to a few ms.
STEP_SECONDS_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015,
    0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
LATENCY_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
QUEUE_SECONDS_BUCKETS = (0.0001, 0.0005, *LATENCY_SECONDS_BUCKETS)
COUNT_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class ServerMetrics:
    """Everything /metrics shows; `render()` returns the text exposition."""

    def __init__(
        self,
        *,
        stats_fn: Callable[[], Any],
        memory_fn: Callable[[], dict[str, int]],
        info_fn: Callable[[], dict[str, str]],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        reg = self.registry
        self.step_duration = Histogram(
            PREFIX + "step_duration_seconds",
            "Wall time of one engine step (schedule + forward + sample + bookkeeping).",
            buckets=STEP_SECONDS_BUCKETS,
            registry=reg,
        )
        self.step_num_seqs = Histogram(
            PREFIX + "step_num_seqs",
            "Sequences in one engine step (batch size).",
            buckets=COUNT_BUCKETS,
            registry=reg,
        )
        self.step_num_tokens = Histogram(
            PREFIX + "step_num_tokens",
            "Tokens computed in one engine step (prefill + decode).",
            buckets=TOKEN_BUCKETS,
            registry=reg,
        )
        self.ttft = self._per_class(
            "ttft_seconds",
            "Server-side time to first token: arrival to first token sampled.",
            LATENCY_SECONDS_BUCKETS,
        )
        self.inter_token = self._per_class(
            "inter_token_seconds",
            "Server-side gap between consecutive output tokens of one request.",
            STEP_SECONDS_BUCKETS,
        )
        self.e2e = self._per_class(
            "e2e_seconds",
            "Server-side end-to-end latency: arrival to last token of a finished request.",
            LATENCY_SECONDS_BUCKETS,
        )
        self.queue = self._per_class(
            "queue_seconds",
            "Time a request waited from arrival until first scheduled.",
            QUEUE_SECONDS_BUCKETS,
        )
        self.embedding_batch_size = Histogram(
            PREFIX + "embedding_batch_size",
            "Inputs in one embeddings forward (dynamic batcher dispatch size).",
            buckets=COUNT_BUCKETS,
            registry=reg,
        )
        self.embedding_latency = Histogram(
            PREFIX + "embedding_latency_seconds",
            "Time from an embeddings request entering the batcher to its vectors being ready.",
            buckets=LATENCY_SECONDS_BUCKETS,
            registry=reg,
        )
        self.embedding_requests = Counter(
            PREFIX + "embedding_requests",
            "Embeddings requests served.",
            registry=reg,
        )
        self._lock = threading.Lock()
        self._server_rejections: dict[str, int] = {}
        reg.register(_EngineCollector(self, stats_fn, memory_fn, info_fn))
        self._exposition = Exposition(reg)

    def _per_class(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        histogram = Histogram(
            PREFIX + name, doc, ["priority"], buckets=buckets, registry=self.registry
        )
        for priority in PRIORITY_CLASSES:
            histogram.labels(priority=priority)  # series exist before the first request
        return histogram

    def observe_step(self, record: Any) -> None:
        """Step listener: runs on the engine thread after every step."""
        self.step_duration.observe(record.duration_seconds)
        self.step_num_seqs.observe(record.num_seqs)
        self.step_num_tokens.observe(record.num_prefill_tokens + record.num_decode_tokens)

    def observe_request(
        self,
        *,
        priority: str,
        ttft_seconds: float | None,
        inter_token_seconds: list[float],
        e2e_seconds: float | None,
        queue_seconds: float | None,
    ) -> None:
        if priority not in PRIORITY_CLASSES:
            return
        if ttft_seconds is not None:
            self.ttft.labels(priority=priority).observe(max(0.0, ttft_seconds))
        if inter_token_seconds:
            _observe_many(self.inter_token.labels(priority=priority), inter_token_seconds)
        if e2e_seconds is not None:
            self.e2e.labels(priority=priority).observe(max(0.0, e2e_seconds))
        if queue_seconds is not None:
            self.queue.labels(priority=priority).observe(max(0.0, queue_seconds))

    def count_rejection(self, reason: str) -> None:
        """A request refused by the HTTP layer itself (the engine counts its own refusals)."""
        with self._lock:
            self._server_rejections[reason] = self._server_rejections.get(reason, 0) + 1

    def server_rejections(self) -> dict[str, int]:
        with self._lock:
            return dict(self._server_rejections)

    def observe_embedding_batch(self, *, size: int) -> None:
        self.embedding_batch_size.observe(size)

    def observe_embedding_request(self, *, latency_seconds: float) -> None:
        self.embedding_requests.inc()
        self.embedding_latency.observe(max(0.0, latency_seconds))

    def render(self) -> bytes:
        return self._exposition.render()


def _observe_many(child: Any, values: list[float]) -> None:
    """`child.observe(max(0, v))` for each value, with one lock round per touched bucket.

    A streamed request ends with one inter-token gap per output token; observing them one by
    one costs a lock pair per token on the event loop, which shares the GIL with the engine.
    """
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:  # prometheus_client internals changed: the public, slower way
            child.observe(max(0.0, value))
        return
    counts: dict[int, int] = {}
    amount = 0.0
    for value in values:
        if value < 0.0:
            value = 0.0
        amount += value
        # observe() counts a value in the first bucket whose upper bound is >= it.
        index = bisect.bisect_left(bounds, value)
        counts[index] = counts.get(index, 0) + 1
    total.inc(amount)
    for index, count in counts.items():
        if index < len(buckets):
            buckets[index].inc(count)


class _EngineCollector:
    """Reads engine counters and gauges at scrape time, so /metrics is never stale."""

    def __init__(
        self,
        metrics: ServerMetrics,
        stats_fn: Callable[[], Any],
        memory_fn: Callable[[], dict[str, int]],
        info_fn: Callable[[], dict[str, str]],
    ) -> None:
        self._metrics = metrics
        self._stats_fn = stats_fn
        self._memory_fn = memory_fn
        self._info_fn = info_fn

    def describe(self) -> list[Metric]:
        return []  # names are generated at collect time; registry checks only collected ones

    def collect(self) -> Iterator[Metric]:
        stats = self._stats_fn()
        yield _counter(
            "preemptions",
            "Sequences preempted (KV blocks reclaimed) for recompute.",
            stats.num_preemptions_total,
        )
        yield _counter(
            "recomputed_tokens",
            "Tokens computed again because their sequence was preempted.",
            stats.num_recomputed_tokens_total,
        )
        yield _counter(
            "prompt_tokens", "Prompt tokens of admitted requests.", stats.num_prompt_tokens_total
        )
        yield _counter(
            "prefill_tokens",
            "Prefill tokens computed, including recomputation after preemption.",
            stats.num_prefill_tokens_total,
        )
        yield _counter(
            "generation_tokens", "Output tokens generated.", stats.num_generation_tokens_total
        )
        yield _counter(
            "prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (each request once, at first admission).",
            stats.num_prefix_cache_queries_total,
        )
        yield _counter(
            "prefix_cache_hits",
            "Prompt tokens found in the prefix cache (their prefill skipped).",
            stats.num_prefix_cache_hits_total,
        )
        finished = CounterMetricFamily(
            PREFIX + "requests_finished",
            "Requests finished, by finish reason.",
            labels=["finish_reason"],
        )
        for reason, count in sorted(stats.num_finished_total_by_reason.items()):
            finished.add_metric([reason], count)
        yield finished
        rejected = CounterMetricFamily(
            PREFIX + "requests_rejected",
            "Requests refused, by reason (engine admission and HTTP-layer checks).",
            labels=["reason"],
        )
        reasons = dict(stats.num_rejected_total_by_reason)
        for reason, count in self._metrics.server_rejections().items():
            reasons[reason] = reasons.get(reason, 0) + count
        for reason, count in sorted(reasons.items()):
            rejected.add_metric([reason], count)
        yield rejected
        yield _counter(
            "requests_aborted",
            "Requests aborted (client gone, drain timeout).",
            stats.num_aborted_total,
        )
        yield _per_class_gauge(
            "num_requests_running",
            "Requests holding KV blocks and being stepped.",
            stats.num_running_by_class,
        )
        yield _per_class_gauge(
            "num_requests_waiting",
            "Requests queued, not yet admitted.",
            stats.num_waiting_by_class,
        )
        yield _gauge(
            "kv_blocks_used",
            "KV cache blocks referenced by requests (cached free blocks excluded).",
            stats.num_kv_blocks_used,
        )
        yield _gauge(
            "kv_blocks_cached",
            "Free KV cache blocks holding a cached prefix (evictable; not in use).",
            stats.num_kv_blocks_cached,
        )
        yield _gauge(
            "kv_blocks_capacity",
            "KV cache blocks in the pool (capacity).",
            stats.num_kv_blocks_total,
        )
        yield _gauge(
            "kv_capacity_tokens",
            "KV cache capacity in tokens (blocks * block size).",
            stats.num_kv_tokens_total,
        )
        yield _gauge(
            "kv_usage_ratio",
            "KV blocks referenced by requests / total (0..1); cached free blocks count as free.",
            stats.kv_usage_ratio,
        )
        yield _gauge(
            "kv_usage_peak_ratio",
            "Highest KV usage ratio since start (0..1).",
            stats.kv_usage_peak_ratio,
        )
        # The slo policy's plan, only while it runs with a ready cost model (absent otherwise:
        # a 0 would read as "no budget").
        for name, doc, value in (
            ("slo_token_budget", "slo policy: the last step's token budget (tokens).",
             stats.slo_token_budget),
            ("slo_predicted_step_seconds", "slo policy: the last step's predicted duration.",
             stats.slo_predicted_step_seconds),
            ("slo_prediction_error_seconds", "slo policy: recent mean |actual - predicted| "
             "step duration.", stats.slo_prediction_error_seconds),
        ):  # fmt: skip
            if value is not None:
                yield _gauge(name, doc, value)
        memory = self._memory_fn()
        for kind, doc in (
            ("allocated", "Device memory held by tensors (0 on CPU)."),
            ("reserved", "Device memory reserved by the allocator (0 on CPU)."),
            ("peak", "Highest device memory held by tensors since start (0 on CPU)."),
        ):
            key = f"device_memory_{kind}_bytes"
            yield _gauge(key, doc, memory.get(key, 0))
        info = GaugeMetricFamily(
            PREFIX + "info",
            "Server identity; always 1.",
            labels=["model", "policy", "device", "version"],
        )
        labels = self._info_fn()
        info.add_metric([labels["model"], labels["policy"], labels["device"], labels["version"]], 1)
        yield info


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value)


def _per_class_gauge(name: str, doc: str, by_class: dict[str, int]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(PREFIX + name, doc, labels=["priority"])
    for priority in PRIORITY_CLASSES:
        gauge.add_metric([priority], by_class.get(priority, 0))
    return gauge
