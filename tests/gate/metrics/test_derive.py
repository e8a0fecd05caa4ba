"""One formula each (docs/records.md): derived values on hand-made records."""

import numpy as np
import pytest
from rundir_builder import WALL0, request_records, step_records, write_profile

from gate.gates.spec import Scope, Settings, Slos
from gate.metrics.derive import measure
from gate.metrics.measurements import Events, Histogram, NoData, Samples, Scalar, Series
from gate.rundir.run import load_run


def _measure(tmp_path, metric, statistic="p99", scope=Scope(), slos=Slos(), **kwargs):
    run = load_run(tmp_path)
    profile = next(iter(run.profiles.values()))
    return measure(
        profile,
        metric,
        statistic,
        scope,
        slos=slos,
        settings=kwargs.pop("settings", Settings()),
        warmup_seconds=None,
    )


def test_client_latency_formulas(tmp_path):
    records = request_records(3, ttft_seconds=[0.1, 0.2, 0.3], chunks=5, itl_seconds=0.02)
    records[2]["status"] = "http_error"
    write_profile(tmp_path, "steady", records)
    assert _measure(tmp_path, "ttft").values == pytest.approx([0.1, 0.2, 0.3])
    assert _measure(tmp_path, "ttft_from_planned").values == pytest.approx([0.1005, 0.2005, 0.3005])
    assert _measure(tmp_path, "e2e").values == pytest.approx([0.1 + 0.081, 0.2 + 0.081])  # ok only
    assert _measure(tmp_path, "tpot").values == pytest.approx([0.081 / 4, 0.081 / 4])
    assert _measure(tmp_path, "schedule_lag").values == pytest.approx([0.0005] * 3)
    # ITL counts every streamed gap, also of a request that failed mid-stream.
    assert len(_measure(tmp_path, "itl").values) == 12


def test_goodput_errors_and_throughput(tmp_path):
    records = request_records(
        100,
        ttft_seconds=np.r_[np.full(90, 0.1), np.full(10, 2.0)],
        http_status=[200] * 95 + [503] * 5,
    )
    for r in records[95:]:
        r["status"] = "http_error"
    write_profile(tmp_path, "steady", records)
    good = _measure(tmp_path, "goodput", "mean", slos=Slos(ttft_seconds=1.0))
    assert isinstance(good, Events) and (good.hits, good.total) == (90, 100)
    assert _measure(tmp_path, "http_5xx", "count").hits == 5
    ok = _measure(tmp_path, "requests", "rate")
    assert ok.hits == 95 and ok.window_seconds == pytest.approx(0.99)
    assert _measure(tmp_path, "output_tokens", "count").hits == 95 * 8


def test_step_latency_exact_from_steps_and_estimated_from_histograms(tmp_path):
    write_profile(tmp_path, "steady", request_records(50), steps=step_records([0.01, 0.02, 0.03]))
    exact = _measure(tmp_path, "step_latency")
    assert isinstance(exact, Samples) and exact.values == pytest.approx([0.01, 0.02, 0.03])
    (tmp_path / "steady" / "steps.jsonl").unlink()
    scrapes = [
        {
            "t": WALL0,
            "phase": "start",
            "ok": True,
            "metrics": {
                "step_duration_seconds": {
                    "buckets": {"0.01": 1, "0.05": 1, "+Inf": 1},
                    "sum": 0.005,
                    "count": 1,
                }
            },
        },
        {
            "t": WALL0 + 0.5,
            "phase": "end",
            "ok": True,
            "metrics": {
                "step_duration_seconds": {
                    "buckets": {"0.01": 11, "0.05": 91, "+Inf": 101},
                    "sum": 3.0,
                    "count": 101,
                }
            },
        },
    ]
    write_profile(tmp_path, "steady", request_records(50), scrapes=scrapes)
    hist = _measure(tmp_path, "step_latency")
    assert isinstance(hist, Histogram)
    assert list(hist.cumulative) == [10, 90, 100]


def test_server_counters_gauges_and_leak(tmp_path):
    steps = step_records([0.01] * 4, used=30, total=100)
    for i, s in enumerate(steps):
        s.update(num_preemptions=i % 2, num_recomputed_tokens=10, num_prefill_tokens=100)
    scrapes = [{"t": WALL0 + 5, "phase": "drain", "ok": True, "metrics": {"kv_blocks_used": 3}}]
    write_profile(tmp_path, "steady", request_records(50), steps=steps, scrapes=scrapes)
    assert _measure(tmp_path, "recompute_ratio", "final").value == pytest.approx(0.1)
    assert _measure(tmp_path, "preemptions", "delta").hits == 2
    assert _measure(tmp_path, "preemptions_per_request", "final").value == pytest.approx(2 / 50)
    assert _measure(tmp_path, "kv_usage", "peak").values == pytest.approx([0.3] * 4)
    assert _measure(
        tmp_path, "queue_length", "peak", scope=Scope(priority=("batch",))
    ).values == pytest.approx([2] * 4)
    assert _measure(tmp_path, "queue_length", "peak").values == pytest.approx([3] * 4)
    assert _measure(tmp_path, "kv_leak_after_drain", "final").value == 3


def test_unavailable_metrics_are_no_data_not_zero(tmp_path):
    scrapes = [
        {
            "t": WALL0 + 0.1,
            "phase": "poll",
            "ok": True,
            "metrics": {"kv_usage_ratio": 0.5},
            "unavailable": ["recomputed_tokens_total"],
        }
    ]
    write_profile(tmp_path, "steady", request_records(50), scrapes=scrapes)
    missing = _measure(tmp_path, "recompute_ratio", "final")
    assert (
        isinstance(missing, NoData) and "does not expose recomputed_tokens_total" in missing.reason
    )
    assert isinstance(_measure(tmp_path, "kv_leak_after_drain", "final"), NoData)


def test_memory_from_the_sampler_including_the_cpu_fallback(tmp_path):
    gpu = [
        {
            "t": WALL0 + 0.1 * i,
            "source": "nvml",
            "device": 0,
            "memory_used_bytes": 1e9 * (i + 1),
            "memory_total_bytes": 8e9,
        }
        for i in range(4)
    ]
    write_profile(tmp_path, "steady", request_records(100), gpu=gpu)
    memory = _measure(tmp_path, "memory_used", "peak")
    assert isinstance(memory, Series) and memory.values.max() == 4e9 and memory.totals[0] == 8e9
    write_profile(
        tmp_path,
        "steady",
        request_records(100),
        gpu=[{"t": WALL0, "source": "none", "note": "no NVML and no pid"}],
    )
    assert "no NVML and no pid" in _measure(tmp_path, "memory_used", "peak").reason


def test_memory_falls_back_to_the_servers_own_resident_memory_metric(tmp_path):
    # A remote CPU target: the sampler had no PID and no NVML, the server reports its RSS.
    scrapes = [
        {
            "t": WALL0 + 0.2 * i,
            "phase": "poll",
            "ok": True,
            "metrics": {"process_resident_memory_bytes": 5e8 + 1e8 * i},
        }
        for i in range(5)
    ]
    scrapes.append({"t": WALL0 + 0.3, "phase": "poll", "ok": False, "error": "timeout"})
    write_profile(
        tmp_path,
        "steady",
        request_records(100),
        scrapes=scrapes,
        gpu=[{"t": WALL0, "source": "none", "note": "no NVML and no pid"}],
    )
    memory = _measure(tmp_path, "memory_used", "peak")
    assert isinstance(memory, Series)
    assert memory.values.max() == 9e8 and len(memory.values) == 5
    assert memory.totals is None  # unknown: a "% of total" gate must not pass on it
    assert "process_resident_memory_bytes" in memory.note and "no NVML and no pid" in memory.note
    # Utilization has no such stand-in.
    assert isinstance(_measure(tmp_path, "gpu_utilization", "mean"), NoData)


def test_memory_without_sampler_or_server_metric_says_both_reasons(tmp_path):
    scrapes = [{"t": WALL0 + 0.1, "phase": "poll", "ok": True, "metrics": {"kv_usage_ratio": 0.1}}]
    write_profile(
        tmp_path,
        "steady",
        request_records(100),
        scrapes=scrapes,
        gpu=[{"t": WALL0, "source": "none", "note": "no NVML and no pid"}],
    )
    missing = _measure(tmp_path, "memory_used", "peak")
    assert isinstance(missing, NoData)
    assert "no NVML and no pid" in missing.reason
    assert "process_resident_memory_bytes" in missing.reason


def test_recovery_time_after_a_spike(tmp_path):
    n = 600  # 6 s at 10 ms spacing: baseline 0-2 s, spike 2-3 s, recovery after
    planned = 1000.0 + np.arange(n) * 0.01
    ttft = np.where(planned < 1002.0, 0.1, np.where(planned < 1004.0, 1.0, 0.1))
    stage = np.where(planned < 1002.0, "baseline", np.where(planned < 1003.0, "spike", "recovery"))
    records = request_records(n, ttft_seconds=ttft, stage=list(stage))
    stages = [
        {"name": "baseline", "start": 1000.0, "end": 1002.0},
        {"name": "spike", "start": 1002.0, "end": 1003.0},
        {"name": "recovery", "start": 1003.0, "end": 1006.0},
    ]
    write_profile(tmp_path, "burst", records, stages=stages)
    recovery = _measure(
        tmp_path, "recovery_time", "final", settings=Settings(recovery_window_seconds=0.5)
    )
    assert isinstance(recovery, Scalar) and not recovery.lower_bound
    assert recovery.value == pytest.approx(
        1.5
    )  # slow until 1004.0: the bin [1004.0, 1004.5) recovers


@pytest.mark.parametrize("slice_requests", [7, 1 << 15])
def test_itl_of_a_run_of_requests_is_a_view_and_equals_the_selection(slice_requests, monkeypatch):
    from types import SimpleNamespace

    from gate.metrics import client
    from gate.metrics.client import _itl_in

    monkeypatch.setattr(client, "_GAP_SLICE_REQUESTS", slice_requests)

    rng = np.random.default_rng(3)
    counts = rng.integers(0, 5, 50)
    req = SimpleNamespace(
        itl_seconds=rng.random(int(counts.sum())).astype(np.float32), itl_counts=counts
    )
    for mask in (
        np.arange(50) >= 7,  # the window's cut: one run
        (np.arange(50) >= 7) & (np.arange(50) < 31),
        np.arange(50) % 3 == 0,  # a priority: scattered
        np.zeros(50, dtype=bool),
        np.ones(50, dtype=bool),
    ):
        expected = req.itl_seconds[np.repeat(mask, counts)]
        got = _itl_in(req, mask)
        np.testing.assert_array_equal(got, expected)
        runs = np.count_nonzero(np.diff(np.concatenate(([0], mask.astype(int), [0]))) == 1)
        if runs == 1:
            assert np.shares_memory(got, req.itl_seconds)


def test_sampler_records_lacking_a_field_or_sampling_nothing_read_like_the_others(tmp_path):
    gpu = [
        {"t": WALL0 + 0.1 * i, "source": "nvml", "memory_used_bytes": 1e9 * (i + 1),
         "memory_total_bytes": 8e9}
        for i in range(4)
    ]  # fmt: skip
    del gpu[2]["memory_total_bytes"]
    gpu.insert(1, {"t": WALL0, "source": "none", "note": "a hiccup"})
    write_profile(tmp_path, "steady", request_records(100), gpu=gpu)
    memory = _measure(tmp_path, "memory_used", "peak")
    assert isinstance(memory, Series)
    np.testing.assert_array_equal(memory.values, [1e9, 2e9, 3e9, 4e9])
    np.testing.assert_array_equal(memory.totals, [8e9, 8e9, np.nan, 8e9])


def test_counts_and_rates_of_an_empty_scope_are_no_data_not_zero(tmp_path):
    # Every request failed, none is in the batch class: "0 errors in batch" is no evidence.
    write_profile(tmp_path, "steady", request_records(50, status="http_error", http_status=503))
    batch = Scope(priority=("batch",))
    for metric, statistic in (("errors", "count"), ("http_5xx", "rate"), ("requests", "rate"),
                              ("errors", "mean"), ("output_tokens", "rate")):  # fmt: skip
        empty = _measure(tmp_path, metric, statistic, scope=batch)
        assert isinstance(empty, NoData) and empty.reason == "empty scope: no requests"
    assert _measure(tmp_path, "errors", "count").hits == 50


def _scraped(values_by_name):
    names = list(values_by_name)
    count = len(values_by_name[names[0]])
    return [
        {"t": WALL0 + 0.1 * i, "phase": "poll", "ok": True,
         "metrics": {name: values_by_name[name][i] for name in names}}
        for i in range(count)
    ]  # fmt: skip


def test_a_counter_that_went_down_is_no_data_for_the_metrics_that_read_it(tmp_path):
    scrapes = _scraped({
        "recomputed_tokens_total": [5000, 9000, 10],
        "prefill_tokens_total": [10000, 12000, 20],
        "preemptions_total": [1, 2, 3],
        "step_duration_seconds": [
            {"buckets": {"0.1": 10, "+Inf": 10}, "sum": 0.5},
            {"buckets": {"0.1": 20, "+Inf": 20}, "sum": 1.0},
            {"buckets": {"0.1": 2, "+Inf": 2}, "sum": 0.1},
        ],
    })  # fmt: skip
    write_profile(tmp_path, "steady", request_records(50), scrapes=scrapes)
    ratio = _measure(tmp_path, "recompute_ratio", "final")
    assert isinstance(ratio, NoData) and "recomputed_tokens_total went down" in ratio.reason
    assert _measure(tmp_path, "preemptions", "delta").hits == 2  # its own counter is whole
    steps = _measure(tmp_path, "step_latency", "p99")
    assert isinstance(steps, NoData) and "step_duration_seconds buckets went down" in steps.reason


def test_a_recompute_ratio_without_prefill_is_no_data_not_zero(tmp_path):
    steps = step_records([0.01] * 4, used=30, total=100)
    for s in steps:
        s.update(num_recomputed_tokens=1250, num_prefill_tokens=0)
    write_profile(tmp_path, "steady", request_records(50), steps=steps)
    ratio = _measure(tmp_path, "recompute_ratio", "final")
    assert (
        isinstance(ratio, NoData)
        and ratio.reason == "no prefill tokens in the window (5000 recomputed)"
    )


def test_a_priority_class_the_target_does_not_report_is_no_data_not_an_empty_queue(tmp_path):
    scrapes = _scraped({"num_requests_waiting": [{"default": 500}, {"default": 400}]})
    write_profile(tmp_path, "steady", request_records(50), scrapes=scrapes)
    interactive = Scope(priority=("interactive",))
    queue = _measure(tmp_path, "queue_length", "peak", scope=interactive)
    assert (
        isinstance(queue, NoData) and "for no class in interactive (only: default)" in queue.reason
    )
    assert _measure(tmp_path, "queue_length", "peak").values == pytest.approx([500, 400])
    steps = step_records([0.01] * 4, used=30, total=100)
    for s in steps:
        s.update(num_waiting={"default": 7}, num_running={"default": 1})
    write_profile(tmp_path, "steady", request_records(50), steps=steps)
    from_steps = _measure(tmp_path, "queue_length", "peak", scope=interactive)
    assert isinstance(from_steps, NoData) and "(only: default)" in from_steps.reason


def test_preemptions_per_request_of_an_empty_scope_is_no_data(tmp_path):
    steps = step_records([0.01] * 4, used=30, total=100)
    write_profile(tmp_path, "steady", request_records(50), steps=steps)
    per_request = _measure(tmp_path, "preemptions_per_request", "final",
                           scope=Scope(priority=("batch",)))  # fmt: skip
    assert isinstance(per_request, NoData)


def test_a_request_that_timed_out_before_its_first_token_counts_with_the_time_it_waited(
    tmp_path,
):
    served = request_records(40, ttft_seconds=[0.1] * 40)
    waited = request_records(10, status="timeout", start=served[-1]["planned_at"] + 0.01)
    refused = request_records(5, status="http_error", http_status=503,
                              start=waited[-1]["planned_at"] + 0.01)  # fmt: skip
    write_profile(tmp_path, "steady", served + waited + refused)
    ttft = _measure(tmp_path, "ttft")
    # The 10 timeouts wait from sent_at to done_at; the 503 answers are not a wait (no TTFT).
    assert len(ttft.values) == 50
    expected = sorted(r["done_at"] - r["sent_at"] for r in waited)
    assert sorted(ttft.values)[-10:] == pytest.approx(expected)
    assert ttft.note.startswith("10 requests timed out or were cancelled before a first token")
    from_planned = _measure(tmp_path, "ttft_from_planned")
    assert len(from_planned.values) == 50 and from_planned.note == ttft.note
    assert _measure(tmp_path, "e2e").note is None  # end to end stays over ok requests
    assert len(_measure(tmp_path, "e2e").values) == 40
