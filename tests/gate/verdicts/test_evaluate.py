"""The evaluator on synthetic runs with known distributions, and every fail-closed case."""

import math

import numpy as np
import pytest
from rundir_builder import request_records, write_jsonl, write_manifest, write_profile

from gate.errors import ExitCode
from gate.gates.file import loads
from gate.metrics.measurements import Samples
from gate.rundir.run import load_run
from gate.units import UnitKind, parse_threshold
from gate.verdicts.assess import assess
from gate.verdicts.evaluate import IncrementalEvaluator, evaluate
from gate.verdicts.verdict import Status


def _gates(body: str, settings: str = "") -> object:
    return loads(f"version: 1\n{settings}gates:\n{body}", path="g.yaml")


TTFT_P99 = """\
  - name: ttft_p99
    metric: ttft
    statistic: p99
    fail: "{fail}"
"""


def _run(tmp_path, ttft, *, manifest_ended="completed", **load_kwargs):
    records = request_records(len(ttft), ttft_seconds=ttft)
    write_profile(tmp_path, "steady", records, **load_kwargs)
    write_manifest(tmp_path, ["steady"], ended=manifest_ended)
    return load_run(tmp_path)


def _one(evaluation):
    assert len(evaluation.verdicts) == 1
    return evaluation.verdicts[0]


def test_known_exponential_p99_passes_below_and_fails_above(tmp_path):
    ttft = np.random.default_rng(1).exponential(0.1, 3000)  # true p99 = 0.4605 s
    run = _run(tmp_path, ttft)
    passing = evaluate(run, _gates(TTFT_P99.format(fail="< 700ms")))
    failing = evaluate(run, _gates(TTFT_P99.format(fail="< 300ms")))
    assert _one(passing).status is Status.PASS and passing.exit_code is ExitCode.PASSED
    assert _one(failing).status is Status.FAIL and failing.exit_code is ExitCode.FAILED
    verdict = _one(passing)
    assert verdict.n == 3000
    assert verdict.value == pytest.approx(0.46, rel=0.15)
    low, high = verdict.interval
    assert low < verdict.value < high
    assert verdict.margin == pytest.approx(0.7 - verdict.value)


def test_a_p99_needs_299_samples_to_pass(tmp_path):
    few = _run(tmp_path / "a", np.full(298, 0.1))
    enough = _run(tmp_path / "b", np.full(299, 0.1))
    gates = _gates(TTFT_P99.format(fail="< 800ms"))
    assert _one(evaluate(few, gates)).status is Status.INCONCLUSIVE
    assert evaluate(few, gates).exit_code is ExitCode.INCONCLUSIVE
    assert _one(evaluate(enough, gates)).status is Status.PASS


def test_inconclusive_policy_pass_lets_the_run_pass(tmp_path):
    run = _run(tmp_path, np.full(50, 0.1))
    gates = _gates(TTFT_P99.format(fail="< 800ms"), "settings: {inconclusive: pass}\n")
    assert evaluate(run, gates).exit_code is ExitCode.PASSED
    assert evaluate(run, gates, inconclusive_policy="fail").exit_code is ExitCode.INCONCLUSIVE


def test_a_server_exactly_at_the_threshold_is_not_declared_pass():
    rng = np.random.default_rng(3)
    threshold = parse_threshold(f"< {-math.log(0.01) * 1000:.6f}ms", kind=UnitKind.DURATION)
    repeats = 300
    passes = sum(
        assess(Samples(values=rng.exponential(1.0, 2000)), "p99", threshold, 0.95).outcome == "pass"
        for _ in range(repeats)
    )
    assert passes / repeats <= 0.06  # one-sided 95 %: a pass here would be a 5 % accident


def test_warn_level_between_warn_and_fail(tmp_path):
    run = _run(tmp_path, np.full(1000, 0.6))
    body = TTFT_P99.format(fail="< 800ms") + '    warn: "< 500ms"\n'
    evaluation = evaluate(run, _gates(body))
    assert _one(evaluation).status is Status.WARN
    assert evaluation.exit_code is ExitCode.PASSED


def test_monitor_gates_report_but_never_fail(tmp_path):
    run = _run(tmp_path, np.full(1000, 2.0))
    body = TTFT_P99.format(fail="< 800ms") + "    monitor: true\n"
    evaluation = evaluate(run, _gates(body))
    assert _one(evaluation).status is Status.FAIL
    assert evaluation.exit_code is ExitCode.PASSED


def test_empty_scope_is_no_data_exit_5(tmp_path):
    run = _run(tmp_path, np.full(500, 0.1))
    body = TTFT_P99.format(fail="< 800ms") + "    scope: {priority: batch}\n"
    evaluation = evaluate(run, _gates(body))
    assert _one(evaluation).status is Status.NO_DATA
    assert "empty scope" in _one(evaluation).reason
    assert evaluation.exit_code is ExitCode.NO_DATA


def test_missing_server_metric_is_no_data(tmp_path):
    run = _run(tmp_path, np.full(500, 0.1))
    body = '  - name: step\n    metric: step_latency\n    statistic: p99\n    fail: "< 50ms"\n'
    verdict = _one(evaluate(run, _gates(body)))
    assert verdict.status is Status.NO_DATA
    assert "step_duration_seconds" in verdict.reason


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"manifest_ended": "target_died"}, "run ended 'target_died'"),
        ({"measurement_valid": False}, "measurement invalid: schedule lag"),
        ({"ended": "interrupted"}, "load ended 'interrupted'"),
    ],
)
def test_dead_target_or_invalid_measurement_never_passes(tmp_path, kwargs, fragment):
    run = _run(tmp_path, np.full(1000, 0.1), **kwargs)
    evaluation = evaluate(run, _gates(TTFT_P99.format(fail="< 800ms")))
    assert _one(evaluation).status is Status.NO_DATA
    assert fragment in _one(evaluation).reason
    assert evaluation.exit_code is ExitCode.NO_DATA


def test_missing_load_json_and_missing_profile_never_pass(tmp_path):
    _run(tmp_path, np.full(1000, 0.1))
    (tmp_path / "steady" / "load.json").unlink()
    body = TTFT_P99.format(fail="< 800ms")
    body += "  - name: other\n    metric: ttft\n    statistic: p50\n"
    body += '    scope: {profile: burst}\n    fail: "< 1s"\n'
    evaluation = evaluate(load_run(tmp_path), _gates(body))
    reasons = {v.id: (v.status, v.reason) for v in evaluation.verdicts}
    assert reasons["ttft_p99@steady"][0] is Status.NO_DATA
    assert "load.json missing" in reasons["ttft_p99@steady"][1]
    assert reasons["other@burst"] == (Status.NO_DATA, "profile 'burst' is not in this run")
    assert evaluation.exit_code is ExitCode.NO_DATA


def test_a_failure_beats_no_data_in_the_exit_code(tmp_path):
    run = _run(tmp_path, np.full(1000, 2.0))
    body = TTFT_P99.format(fail="< 800ms")
    body += '  - name: step\n    metric: step_latency\n    statistic: p99\n    fail: "< 50ms"\n'
    assert evaluate(run, _gates(body)).exit_code is ExitCode.FAILED


def test_error_share_is_judged_on_its_exact_interval(tmp_path):
    statuses = ["ok"] * 980 + ["http_error"] * 20
    write_profile(tmp_path, "steady", request_records(1000, status=statuses, http_status=200))
    run = load_run(tmp_path)
    body = '  - name: errors\n    metric: errors\n    statistic: mean\n    fail: "< {x}"\n'
    assert _one(evaluate(run, _gates(body.format(x="5%")))).status is Status.PASS
    assert _one(evaluate(run, _gates(body.format(x="1%")))).status is Status.FAIL
    assert _one(evaluate(run, _gates(body.format(x="2.5%")))).status is Status.INCONCLUSIVE


def test_warmup_requests_are_excluded(tmp_path):
    ttft = np.r_[np.full(200, 5.0), np.full(1000, 0.1)]  # slow first 2 s (spacing 10 ms)
    records = request_records(len(ttft), ttft_seconds=ttft)
    write_profile(tmp_path, "steady", records, warmup_seconds=2.0)
    run = load_run(tmp_path)
    verdict = _one(evaluate(run, _gates(TTFT_P99.format(fail="< 800ms"))))
    assert verdict.status is Status.PASS and verdict.n == 1000


def test_ratio_between_scopes_gate(tmp_path):
    n = 1000
    stages = ["unloaded"] * n + ["loaded"] * n
    records = request_records(
        2 * n, ttft_seconds=np.r_[np.full(n, 0.1), np.full(n, 0.25)], stage=stages
    )
    write_profile(tmp_path, "priority_mix", records)
    run = load_run(tmp_path)
    body = (
        "  - name: prio\n    metric: ttft\n    statistic: p99\n"
        "    scope: {profile: priority_mix, stage: loaded}\n"
        '    relative_to: {scope: {stage: unloaded}}\n    fail: "< {x}"\n'
    )
    passing = _one(evaluate(run, _gates(body.replace("{x}", "3x"))))
    failing = _one(evaluate(run, _gates(body.replace("{x}", "2x"))))
    assert passing.status is Status.PASS and passing.value == pytest.approx(2.5)
    assert passing.reference_value == pytest.approx(0.1)
    assert failing.status is Status.FAIL


def test_incremental_evaluator_aborts_only_on_a_confident_failure_after_grace(tmp_path):
    records = request_records(400, ttft_seconds=np.full(400, 2.0))
    (tmp_path / "steady").mkdir()
    write_jsonl(tmp_path / "steady" / "requests.jsonl", records)  # no load.json yet: still running
    body = TTFT_P99.format(fail="< 800ms") + "    abort_on_fail: true\n"
    gates = _gates(body, "settings: {abort_grace_seconds: 10s}\n")
    run = load_run(tmp_path)
    monitor = IncrementalEvaluator(gates)
    assert monitor.check(run, elapsed_seconds=5) == []
    failing = monitor.check(run, elapsed_seconds=11)
    assert [v.gate for v in failing] == ["ttft_p99"]
    healthy = tmp_path / "healthy"
    (healthy / "steady").mkdir(parents=True)
    write_jsonl(
        healthy / "steady" / "requests.jsonl", request_records(20, ttft_seconds=np.full(20, 0.1))
    )
    assert monitor.check(load_run(healthy), elapsed_seconds=60) == []


def test_no_gates_is_not_a_pass(tmp_path):
    run = _run(tmp_path, np.full(10, 0.1))
    evaluation = evaluate(run, loads("version: 1\n", path="g.yaml"))
    assert evaluation.exit_code is ExitCode.NO_DATA


def test_neighbouring_sample_gates_on_one_scope_share_one_measurement(tmp_path, monkeypatch):
    from gate.metrics import derive

    run = _run(tmp_path, np.random.default_rng(3).exponential(0.1, 1000))
    calls = []
    real = derive.measure
    monkeypatch.setattr(derive, "measure", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    body = "".join(
        f'  - {{name: t{i}, metric: ttft, statistic: {s}, fail: "< 2s"}}\n'
        for i, s in enumerate(("p50", "p99", "max"))
    )
    errors = '  - {name: e, metric: errors, statistic: mean, fail: "< 1%"}\n'
    shared = evaluate(run, _gates(body + errors))
    # One measurement per (metric, scope), in whatever order the judge's thread pool ran them.
    assert sorted(calls) == ["errors", "ttft"]
    monkeypatch.setattr(derive, "measure", real)
    alone = [evaluate(run, _gates(line + "\n")) for line in body.splitlines()]
    assert [v.value for v in shared.verdicts[:3]] == [_one(e).value for e in alone]


ITL_AND_TTFT = """\
  - name: itl_p50
    metric: itl
    statistic: p50
    fail: "< 1s"
  - name: ttft_p50
    metric: ttft
    statistic: p50
    fail: "< 1s"
"""


@pytest.mark.parametrize(
    ("sources", "noted"),
    [(["usage"] * 40, False), (["usage"] * 39 + ["assumed"], True), (["mixed"] * 40, True)],
)
def test_an_itl_verdict_says_when_its_gaps_are_per_chunk(tmp_path, sources, noted):
    from gate.verdicts.judge import ITL_PER_CHUNK_NOTE

    records = request_records(40)
    for record, source in zip(records, sources, strict=True):
        record["chunk_tokens_source"] = source
    write_profile(tmp_path, "steady", records)
    write_manifest(tmp_path, ["steady"])
    itl, ttft = evaluate(load_run(tmp_path), _gates(ITL_AND_TTFT)).verdicts
    assert (ITL_PER_CHUNK_NOTE in itl.notes) is noted
    assert ITL_PER_CHUNK_NOTE not in ttft.notes


def test_records_without_a_source_are_per_chunk_but_gapless_ones_do_not_count(tmp_path):
    from gate.verdicts.judge import ITL_PER_CHUNK_NOTE

    records = request_records(40)
    records[0].pop("chunk_tokens_source")  # an older run: one token a chunk was assumed
    write_profile(tmp_path / "old", "steady", records)
    write_manifest(tmp_path / "old", ["steady"])
    (itl,) = evaluate(load_run(tmp_path / "old"), _gates(ITL_AND_TTFT)).verdicts[:1]
    assert ITL_PER_CHUNK_NOTE in itl.notes
    # a one-chunk answer (non-streamed) has no ITL gap: its source does not matter
    records = request_records(40) + request_records(1, chunks=1, start=2000.0)
    records[-1].update(id="1-0", chunk_tokens_source="assumed")
    write_profile(tmp_path / "one", "steady", records)
    write_manifest(tmp_path / "one", ["steady"])
    (itl,) = evaluate(load_run(tmp_path / "one"), _gates(ITL_AND_TTFT)).verdicts[:1]
    assert ITL_PER_CHUNK_NOTE not in itl.notes


def test_gates_judged_on_threads_give_the_sequential_verdicts_in_order(tmp_path, monkeypatch):
    # verdicts_for judges chains of gates on worker threads; order and values must not depend
    # on how many there are or which finishes first.
    from gate.verdicts import judge

    rng = np.random.default_rng(7)
    n = 2000
    records = request_records(
        n, ttft_seconds=rng.exponential(0.1, n),
        priority=np.where(rng.random(n) < 0.5, "interactive", "batch").tolist(),
    )  # fmt: skip
    write_profile(tmp_path, "steady", records)
    write_manifest(tmp_path, ["steady"])
    run = load_run(tmp_path)
    specs = [
        ("ttft", "p50", "{}", "< 1s"), ("ttft", "p99", "{}", "< 100ms"),
        ("itl", "p50", "{}", "< 1s"), ("itl", "p99", "{}", "< 1s"),
        ("ttft", "p90", "{priority: batch}", "< 1s"), ("e2e", "p99", "{}", "< 10s"),
        ("errors", "mean", "{}", "< 1%"), ("ttft", "p999", "{}", "< 5s"),
        ("tpot", "p50", "{priority: interactive}", "< 1s"), ("itl", "p90", "{}", "< 2ms"),
    ]  # fmt: skip
    body = "".join(
        f'  - name: g{i}\n    metric: {m}\n    statistic: {s}\n    scope: {sc}\n    fail: "{f}"\n'
        for i, (m, s, sc, f) in enumerate(specs)
    )
    gates = _gates(body)
    monkeypatch.setattr(judge.os, "cpu_count", lambda: 1)
    sequential = evaluate(run, gates)
    monkeypatch.setattr(judge.os, "cpu_count", lambda: 8)
    for _ in range(3):
        threaded = evaluate(run, gates)
        assert [v.to_dict() for v in threaded.verdicts] == [
            v.to_dict() for v in sequential.verdicts
        ]
    assert [v.gate for v in sequential.verdicts] == [f"g{i}" for i in range(len(specs))]
    assert {v.status for v in sequential.verdicts} >= {Status.PASS, Status.FAIL}
