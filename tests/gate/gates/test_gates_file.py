import pytest

from gate.gates.file import loads, validate_against_buckets
from gate.gates.reader import GatesFileError
from gate.units import UnitKind

GOOD = """\
version: 1
settings:
  confidence: 0.9
  inconclusive: pass
  warmup_seconds: 5s
slos: {ttft: 1s, tpot: 100ms, e2e: 20s}
presets:
  safe:
    policy: continuous
    max_num_seqs: 32
    shared_queue: false
    kv_cache_memory_bytes: 2GiB
    interactive: {max_waiting: 64, max_batch_size: 8, max_wait_ms: 0, dispatch_threshold: 4}
    batch: {max_waiting: 256, max_wait_ms: 50}
profiles:
  burst: {spike_rate: 40, duration: 30}
gates:
  - name: ttft_p99
    key: true
    metric: ttft
    statistic: p99
    scope: {profile: steady, priority: [interactive]}
    fail: "< 800ms"
    warn: "< 500ms"
    rollback: safe
    knob: interactive.max_wait_ms
    abort_on_fail: true
  - name: step
    source: server
    metric: step_latency
    statistic: p99
    fail: "< 0.05s"
  - name: prio
    metric: ttft
    statistic: p99
    scope: {profile: priority_mix, stage: loaded, priority: interactive}
    relative_to: {scope: {stage: unloaded}}
    fail: "< 3x"
  - name: e2e_regression
    metric: e2e
    statistic: p90
    baseline: {max_increase: 10%, floor: 5ms}
  - name: leak
    metric: kv_leak_after_drain
    fail: "== 0"
  - name: mem
    metric: memory_used
    statistic: peak
    monitor: true
"""


def test_a_valid_file_loads_into_typed_values():
    gates = loads(GOOD, path="g.yaml")
    assert gates.settings.confidence == 0.9
    assert gates.settings.inconclusive == "pass"
    assert gates.settings.warmup_seconds == 5.0
    assert gates.slos.tpot_seconds == pytest.approx(0.1)
    assert gates.presets["safe"]["kv_cache_memory_bytes"] == 2 * 1024**3
    assert gates.presets["safe"]["interactive"]["max_batch_size"] == 8
    assert gates.profiles == {"burst": {"spike_rate": 40, "duration": 30}}
    by_name = {g.name: g for g in gates.gates}
    ttft = by_name["ttft_p99"]
    assert ttft.key and ttft.abort_on_fail and ttft.rollback == "safe"
    assert ttft.scope.priority == ("interactive",)
    assert ttft.fail.value == pytest.approx(0.8)
    assert ttft.line == 18
    assert by_name["prio"].relative_to.stage == ("unloaded",)
    assert by_name["prio"].relative_to.priority == ("interactive",)
    assert by_name["prio"].unit is UnitKind.FACTOR
    assert by_name["e2e_regression"].regression.floor == pytest.approx(0.005)
    assert by_name["leak"].statistic == "final"  # the only statistic that fits is the default
    assert by_name["mem"].monitor and by_name["mem"].fail is None
    assert len(gates.sha256) == 64


def test_histogram_thresholds_must_fall_on_a_bucket_bound():
    gates = loads(GOOD, path="g.yaml")
    validate_against_buckets(
        gates, {"step_duration_seconds": [0.01, 0.025, 0.05, 0.1, float("inf")]}
    )
    with pytest.raises(GatesFileError) as caught:
        validate_against_buckets(gates, {"step_duration_seconds": [0.01, 0.1, float("inf")]})
    assert caught.value.key_path == "gates[1].fail"
    assert caught.value.line == 32
    assert "cannot resolve" in caught.value.message


def test_empty_file_is_an_error_with_a_hint():
    with pytest.raises(GatesFileError, match="version: 1"):
        loads("", path="empty.yaml")


def test_docs_example_loads_and_every_metric_is_documented():
    import re
    from pathlib import Path

    from gate.glossary import METRICS

    text = (Path(__file__).parents[3] / "docs" / "gates.md").read_text()
    for metric in METRICS:
        assert f"| `{metric}` |" in text, f"docs/gates.md does not document {metric}"
    example = re.findall(r"```yaml\n(.*?)```", text, re.S)[-1]
    assert len(loads(example, path="docs/gates.md").gates) == 10
