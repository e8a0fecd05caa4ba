"""Request records that do not add up to the load that load.json describes: lost records,
records of another load mixed in or planned after the window, a load.json that does not say
how the load ended. Each is judged no data (or left out), never passed on what is left."""

from __future__ import annotations

import json

from rundir_builder import MONO0, load_json, request_records, write_jsonl, write_profile

from gate.errors import ExitCode
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Status

NO_ERRORS = loads(
    """\
version: 1
gates:
  - name: no_errors
    metric: errors
    statistic: count
    fail: "== 0"
  - name: throughput
    metric: requests
    statistic: rate
    fail: "> 5/s"
"""
)


def _verdicts(run_dir):
    evaluation = evaluate(load_run(run_dir), NO_ERRORS)
    return evaluation, {v.gate: v for v in evaluation.verdicts}


def test_records_lost_before_requests_jsonl_are_no_data_not_a_pass(tmp_path):
    ok = request_records(100)
    timed_out = request_records(300, status="timeout")
    directory = write_profile(tmp_path, "steady", ok)
    # load.json as the load generator wrote it: 400 records, 300 of them timeouts.
    (directory / "load.json").write_text(json.dumps(load_json("steady", ok + timed_out)))
    evaluation, verdicts = _verdicts(tmp_path)
    assert verdicts["no_errors"].status is Status.NO_DATA
    assert "hold 100 requests, load.json counted 400: records were lost" in (
        verdicts["no_errors"].reason
    )
    assert evaluation.exit_code == ExitCode.NO_DATA


def test_records_of_another_load_mixed_in_are_no_data(tmp_path):
    records = request_records(100)
    directory = write_profile(tmp_path, "steady", records)
    write_jsonl(directory / "requests.jsonl", records * 2)  # the same lines appended again
    _, verdicts = _verdicts(tmp_path)
    assert verdicts["no_errors"].status is Status.NO_DATA
    assert "records of another load are mixed in" in verdicts["no_errors"].reason


def test_a_load_json_that_does_not_say_how_the_load_ended_is_no_data(tmp_path):
    records = request_records(100)
    for missing in ("ended", "measurement_valid"):
        directory = write_profile(tmp_path, "steady", records)
        load = load_json("steady", records)
        del load[missing]
        (directory / "load.json").write_text(json.dumps(load))
        _, verdicts = _verdicts(tmp_path)
        assert verdicts["no_errors"].status is Status.NO_DATA
        assert f"load.json has no {missing!r}" in verdicts["no_errors"].reason


def test_records_planned_after_the_window_are_left_out(tmp_path):
    inside = request_records(100)  # planned over ~1 s
    later = request_records(900, start=MONO0 + 500.0)
    directory = write_profile(tmp_path, "steady", inside + later)
    load = load_json("steady", inside + later, window=(MONO0, MONO0 + 10.0))
    (directory / "load.json").write_text(json.dumps(load))
    _, verdicts = _verdicts(tmp_path)
    # 100 requests over the 10 s window: 10/s, not the 100/s all 1000 records would make.
    assert verdicts["throughput"].value == 10.0
    assert verdicts["no_errors"].n == 100


def test_a_ttft_gate_fails_when_most_requests_timed_out_waiting_for_a_first_token(tmp_path):
    served = request_records(40, ttft_seconds=[0.05] * 40)
    waited = request_records(360, status="timeout", start=served[-1]["planned_at"] + 0.01)
    write_profile(tmp_path, "steady", served + waited)
    gates = loads(
        'version: 1\ngates:\n  - {name: ttft_p90, metric: ttft, statistic: p90, fail: "< 200ms"}\n'
    )
    evaluation = evaluate(load_run(tmp_path), gates)
    (verdict,) = evaluation.verdicts
    # Left out, the 360 timeouts made this a pass on the 40 requests served in time.
    assert verdict.status is Status.FAIL and verdict.n == 400
    assert "360 requests timed out or were cancelled before a first token" in verdict.reason
