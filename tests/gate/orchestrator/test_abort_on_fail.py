"""`abort_on_fail`: only a confident failure after the grace period stops a profile; the stopping
gate's verdict is that failure, judged again from `abort.json` exactly as it was decided; the
profile's other gates are no data and the profiles after it are not run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rundir_builder import load_json, request_records, write_jsonl, write_manifest

from gate.errors import ExitCode
from gate.gates.file import loads
from gate.orchestrator.abort_watch import AbortWatch
from gate.rundir.abort import SNAPSHOT_FILES, AbortRecord, read_abort, write_abort
from gate.rundir.requests import read_requests
from gate.rundir.run import RunDirError, load_run, profile_prefix
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Status

ABORT_GATES = """\
version: 1
settings: {abort_grace_seconds: 10s}
gates:
  - name: ttft_p50
    metric: ttft
    statistic: p50
    fail: "< 800ms"
    abort_on_fail: %s
  - name: errors
    metric: errors
    statistic: mean
    fail: "< 1%%"
"""


def _gates(abort: str = "true", grace: str = "10s"):  # type: ignore[no-untyped-def]
    text = ABORT_GATES % abort
    return loads(text.replace("10s", grace), path="g.yaml")


def _watch(run_dir: Path, gates, **kwargs) -> AbortWatch:  # type: ignore[no-untyped-def]
    return AbortWatch(
        gates_file=gates,
        profile="steady",
        directory=run_dir / "steady",
        warmup_seconds=0.0,
        started_at=0.0,
        **kwargs,
    )


def _running_profile(run_dir: Path, ttft: np.ndarray) -> Path:
    directory = run_dir / "steady"
    directory.mkdir(parents=True)
    write_jsonl(directory / "requests.jsonl", request_records(len(ttft), ttft_seconds=ttft))
    return directory


def _finish_aborted(run_dir: Path, record: AbortRecord, later: int = 50) -> None:
    """What the run does after the decision: abort.json, the load's last records (fast ones,
    and a cut-off line), load.json ended interrupted, manifest ended aborted."""
    directory = run_dir / "steady"
    write_abort(directory, record)
    slow = record.lines["requests.jsonl"]
    fast = request_records(later, ttft_seconds=np.full(later, 0.01), start=2000.0)
    with (directory / "requests.jsonl").open("ab") as handle:
        handle.write(b"".join(json.dumps(r).encode() + b"\n" for r in fast))
    records = request_records(slow) + fast
    (directory / "load.json").write_text(
        json.dumps(load_json("steady", records, ended="interrupted"))
    )
    write_manifest(run_dir, ["steady"], ended="aborted")


def _aborted_run(run_dir: Path, gates) -> AbortRecord:  # type: ignore[no-untyped-def]
    _running_profile(run_dir, np.full(40, 2.0))
    record = _watch(run_dir, gates).poll(now=11.0)
    assert record is not None
    _finish_aborted(run_dir, record)
    return record


def test_no_abort_before_the_grace_period(tmp_path: Path) -> None:
    _running_profile(tmp_path, np.full(40, 2.0))
    watch = _watch(tmp_path, _gates())
    assert watch.active
    assert watch.poll(now=9.9) is None
    assert watch.poll(now=10.5) is not None


def test_no_abort_on_an_inconclusive_verdict(tmp_path: Path) -> None:
    # 3 of 6 over the p50 threshold: the share could be below one half, so no confident failure.
    _running_profile(tmp_path, np.array([2.0, 2.0, 2.0, 0.1, 0.1, 0.1]))
    assert _watch(tmp_path, _gates()).poll(now=60.0) is None


def test_no_abort_on_a_healthy_profile_or_without_abort_gates(tmp_path: Path) -> None:
    _running_profile(tmp_path, np.full(200, 0.1))
    assert _watch(tmp_path, _gates()).poll(now=60.0) is None
    _running_profile(tmp_path / "b", np.full(200, 2.0))
    assert not _watch(tmp_path / "b", _gates(abort="false")).active


def test_the_watch_polls_at_most_once_a_second(tmp_path: Path) -> None:
    _running_profile(tmp_path, np.full(200, 0.1))
    watch = _watch(tmp_path, _gates())
    assert watch.poll(now=11.0) is None
    with (tmp_path / "steady" / "requests.jsonl").open("wb") as handle:
        handle.write(
            b"".join(
                json.dumps(r).encode() + b"\n"
                for r in request_records(40, ttft_seconds=np.full(40, 2.0))
            )
        )
    assert watch.poll(now=11.5) is None  # not due yet
    assert watch.poll(now=12.1) is not None


def test_the_aborting_gate_fails_with_the_value_at_abort_time(tmp_path: Path) -> None:
    gates = _gates()
    record = _aborted_run(tmp_path, gates)
    assert record.gate == "ttft_p50" and record.lines["requests.jsonl"] == 40
    evaluation = evaluate(load_run(tmp_path), gates)
    assert evaluation.exit_code is ExitCode.FAILED
    by_id = {v.id: v for v in evaluation.verdicts}
    stopped = by_id["ttft_p50@steady"]
    assert stopped.status is Status.FAIL
    assert stopped.reason.startswith("aborted the run early: confident failure after 40 samples")
    # The 50 fast records written after the decision do not count: the value is the slow one's.
    assert stopped.n == 40 == record.verdict["n"]
    assert stopped.value == pytest.approx(2.0) == pytest.approx(record.verdict["value"])
    assert list(stopped.interval) == pytest.approx(record.verdict["interval"])
    other = by_id["errors@steady"]
    assert other.status is Status.NO_DATA
    assert "stopped early by abort_on_fail gate 'ttft_p50'" in other.reason


def test_evaluating_twice_gives_the_same_verdicts(tmp_path: Path) -> None:
    gates = _gates()
    _aborted_run(tmp_path, gates)
    first = evaluate(load_run(tmp_path), gates)
    second = evaluate(load_run(tmp_path), gates)
    assert [v.to_dict() for v in first.verdicts] == [v.to_dict() for v in second.verdicts]


def test_a_gates_file_that_does_not_abort_does_not_reproduce_the_failure(tmp_path: Path) -> None:
    _aborted_run(tmp_path, _gates())
    for gates in (_gates(abort="false"), _gates(grace="60s")):
        evaluation = evaluate(load_run(tmp_path), gates)
        assert {v.status for v in evaluation.verdicts} == {Status.NO_DATA}
        assert evaluation.exit_code is ExitCode.NO_DATA


def test_an_abort_record_in_a_run_cut_short_is_still_no_data(tmp_path: Path) -> None:
    gates = _gates()
    _aborted_run(tmp_path, gates)
    write_manifest(tmp_path, ["steady"], ended="interrupted")  # Ctrl-C while stopping
    evaluation = evaluate(load_run(tmp_path), gates)
    assert {v.status for v in evaluation.verdicts} == {Status.NO_DATA}


def test_profiles_after_the_abort_were_not_run(tmp_path: Path) -> None:
    text = ABORT_GATES % "true" + (
        "  - name: burst_ttft\n    metric: ttft\n    statistic: p50\n"
        '    scope: {profile: burst}\n    fail: "< 1s"\n'
    )
    gates = loads(text, path="g.yaml")
    _aborted_run(tmp_path, gates)
    evaluation = evaluate(load_run(tmp_path), gates)
    burst = next(v for v in evaluation.verdicts if v.id == "burst_ttft@burst")
    assert burst.status is Status.NO_DATA and "was not run" in burst.reason
    assert evaluation.exit_code is ExitCode.FAILED


def test_profile_prefix_reads_only_the_counted_lines(tmp_path: Path) -> None:
    directory = _running_profile(tmp_path, np.full(30, 2.0))
    with (directory / "requests.jsonl").open("ab") as handle:
        handle.write(b'{"id": "cut-off", "planned_')
    lines = {name: 0 for name in SNAPSHOT_FILES} | {"requests.jsonl": 12}
    view = profile_prefix("steady", directory, lines=lines, load=None)
    assert view.requests is not None and view.requests.n == 12
    full = read_requests(directory / "requests.jsonl")
    assert full.n == 30 and full.partial_last_line
    assert np.array_equal(view.requests.planned_at, full.planned_at[:12])
    assert read_requests(directory / "requests.jsonl", max_records=0).n == 0


def test_abort_record_round_trips_and_a_broken_one_is_an_error(tmp_path: Path) -> None:
    gates = _gates()
    record = _aborted_run(tmp_path, gates)
    assert read_abort(tmp_path / "steady") == record
    assert "ttft_p50@steady: ttft p50" in record.describe()
    (tmp_path / "steady" / "abort.json").write_text('{"schema_version": 1, "gate": 3}')
    with pytest.raises(RunDirError, match=r"abort\.json"):
        load_run(tmp_path)


def test_a_growing_count_aborts_past_an_upper_limit_only(tmp_path: Path) -> None:
    directory = tmp_path / "steady"
    directory.mkdir()
    status = ["http_error"] * 3 + ["ok"] * 37
    write_jsonl(directory / "requests.jsonl", request_records(40, status=status))
    body = (
        "version: 1\nsettings: {abort_grace_seconds: 1s}\ngates:\n"
        '  - {name: few, metric: requests, statistic: count, fail: "> 1000", abort_on_fail: true}\n'
        '  - {name: none, metric: errors, statistic: count, fail: "== 0", abort_on_fail: true}\n'
    )
    record = _watch(tmp_path, loads(body, path="g.yaml")).poll(now=2.0)
    assert record is not None and record.gate == "none"  # `few` may still reach 1000
    only_few = body.rsplit("  - {name: none", 1)[0]
    assert _watch(tmp_path, loads(only_few, path="g.yaml")).poll(now=2.0) is None
