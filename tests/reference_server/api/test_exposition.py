"""reference_server.api.exposition renders exactly what prometheus_client's generate_latest does."""

from __future__ import annotations

import random
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString

from reference_server.api import exposition
from reference_server.api.exposition import Exposition
from reference_server.api.metrics import ServerMetrics


class _Custom:
    """A collector like the server's engine collector: families built at scrape time."""

    def __init__(self) -> None:
        self.value = 0.0

    def describe(self) -> list:
        return []

    def collect(self):
        yield CounterMetricFamily("x_events", "Events.\nWith a \\ and a newline.", value=self.value)
        family = GaugeMetricFamily("x_by_reason", 'Quotes " in help.', labels=["reason"])
        family.add_metric(['a "quoted"\\value\n'], 1.5)
        family.add_metric(["ünïcode"], float("inf"))
        family.add_metric(["nan"], float("nan"))
        family.add_metric(["big"], 12345678.0)
        yield family


def _registry() -> tuple[CollectorRegistry, list]:
    registry = CollectorRegistry(auto_describe=True)
    plain = Histogram("x_step_seconds", "Steps.", buckets=(0.001, 0.01, 0.1), registry=registry)
    labelled = Histogram(
        "x_ttft_seconds", "TTFT.", ["priority", "zone"], buckets=(0.5, 1, 5), registry=registry
    )
    negative = Histogram("x_delta", "Deltas.", buckets=(-1, 0, 1), registry=registry)
    counter = Counter("x_requests", "Requests.", ["code"], registry=registry)
    gauge = Gauge("x_depth", "Depth.", registry=registry)
    custom = _Custom()
    registry.register(custom)
    return registry, [plain, labelled, negative, counter, gauge, custom]


def _observe(parts: list, rng: random.Random) -> None:
    plain, labelled, negative, counter, gauge, custom = parts
    for _ in range(rng.randrange(1, 50)):
        plain.observe(rng.expovariate(50))
        labelled.labels(priority=rng.choice(["interactive", "batch"]), zone="z1").observe(
            rng.expovariate(1)
        )
        negative.observe(rng.uniform(-3, 3))
        counter.labels(code=rng.choice(["200", "429"])).inc()
    gauge.set(rng.uniform(-10, 10))
    custom.value += rng.randrange(10)


def test_output_is_byte_identical_to_the_library_as_values_and_series_change() -> None:
    registry, parts = _registry()
    renderer = Exposition(registry)
    assert renderer.render() == generate_latest(registry)  # before any observation
    rng = random.Random(7)
    for _ in range(20):  # the memo of line prefixes must follow new series and new values
        _observe(parts, rng)
        assert renderer.render() == generate_latest(registry)


def test_unchanged_histograms_reuse_their_text_and_any_change_shows() -> None:
    registry = CollectorRegistry()
    moving = Histogram("x_moving", "Moves.", buckets=(1, 2), registry=registry)
    still = Histogram("x_still", "Still.", ["priority"], buckets=(1, 2), registry=registry)
    still.labels(priority="batch").observe(1.5)
    renderer = Exposition(registry)
    for step in range(5):
        moving.observe(0.5 * step)
        assert renderer.render() == generate_latest(registry)
    # A zero leaves the sum as it was and moves only the counts; so does a value at a bound.
    still.labels(priority="batch").observe(0.0)
    assert renderer.render() == generate_latest(registry)
    still.labels(priority="batch").observe(2.0)
    assert renderer.render() == generate_latest(registry)
    assert b'x_still_count{priority="batch"} 3.0' in renderer.render()
    # A child removed and made again: the same zeros as before, a new creation time.
    still.labels(priority="new")
    assert renderer.render() == generate_latest(registry)
    time.sleep(0.01)
    still.remove("new")
    still.labels(priority="new")
    assert renderer.render() == generate_latest(registry)


def test_the_servers_own_metrics_render_like_the_library() -> None:
    stats = _Stats()
    metrics = ServerMetrics(
        stats_fn=lambda: stats,
        memory_fn=lambda: {"device_memory_peak_bytes": 123},
        info_fn=lambda: {"model": "tiny", "policy": "continuous", "device": "cpu", "version": "1"},
    )
    for i in range(300):
        metrics.step_duration.observe(i * 1e-4)
        metrics.observe_request(
            priority="interactive", ttft_seconds=0.01 * i, inter_token_seconds=[0.001] * 5,
            e2e_seconds=0.5, queue_seconds=None,
        )  # fmt: skip

    def without_process(text: bytes) -> list[bytes]:
        # process_* read /proc at each scrape (CPU seconds, RSS): they differ between two calls.
        return [line for line in text.splitlines() if b"process_" not in line]

    ours = metrics.render()
    assert without_process(ours) == without_process(generate_latest(metrics.registry))
    assert b"batchgate_ttft_seconds_bucket{le=" in ours and b"process_resident_memory_bytes" in ours


def test_a_sample_the_fast_path_does_not_know_falls_back_to_the_library() -> None:
    registry = CollectorRegistry()

    class Stamped:
        def collect(self):
            family = GaugeMetricFamily("x_stamped", "With a timestamp.")
            family.add_metric([], 2.0, timestamp=1_764_400_000.25)  # fixed: both renders see it
            yield family

    registry.register(Stamped())
    assert Exposition(registry).render() == generate_latest(registry)


def test_a_histogram_subclass_is_rendered_through_its_own_collect() -> None:
    class Renamed(Histogram):
        def collect(self):  # what the fast path would not know about
            (metric,) = super().collect()
            metric.documentation = "Changed at collect time."
            return [metric]

    registry = CollectorRegistry()
    Renamed("x_sub_seconds", "Original.", buckets=(1, 2), registry=registry).observe(1.5)
    assert Exposition(registry).render() == generate_latest(registry)
    assert b"Changed at collect time." in Exposition(registry).render()


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 3.0, 1e7, 1234567.0, 12345678.0, 1e-7, -5.5, -1e20, 1e20, 0.001, 2.5e-5,
     123456.789, 1764400000.123, float("inf"), float("-inf"), float("nan"), 7],
)  # fmt: skip
def test_numbers_are_written_as_go_writes_them(value: float) -> None:
    assert exposition._number(value) == floatToGoString(value)


def test_random_numbers_are_written_as_go_writes_them() -> None:
    rng = random.Random(3)
    for _ in range(20_000):
        value = rng.random() * 10 ** rng.randint(-12, 22) * rng.choice((1, -1))
        assert exposition._number(value) == floatToGoString(value)
        whole = float(rng.randrange(10**13))
        assert exposition._number(whole) == floatToGoString(whole)


class _Stats:
    num_preemptions_total = 1
    num_recomputed_tokens_total = 2
    num_prompt_tokens_total = 3
    num_prefill_tokens_total = 4
    num_generation_tokens_total = 5
    num_prefix_cache_queries_total = 6
    num_prefix_cache_hits_total = 7
    num_finished_total_by_reason = {"length": 3, "stop": 2}  # noqa: RUF012
    num_rejected_total_by_reason = {"too_long": 1}  # noqa: RUF012
    num_aborted_total = 0
    num_running_by_class = {"interactive": 2, "batch": 0}  # noqa: RUF012
    num_waiting_by_class = {"interactive": 0, "batch": 1}  # noqa: RUF012
    num_kv_blocks_used = 1
    num_kv_blocks_cached = 8
    num_kv_blocks_total = 100
    num_kv_tokens_total = 1600
    kv_usage_ratio = 0.01
    kv_usage_peak_ratio = 0.2
    slo_token_budget = None
    slo_predicted_step_seconds = None
    slo_prediction_error_seconds = None
