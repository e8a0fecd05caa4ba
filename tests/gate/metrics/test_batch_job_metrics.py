"""The offline job's metrics from load.json's `batch_job` summary, and an offline_job run judged
by the gates docs/gates.md suggests (chat TTFT during the job vs before it; job completion)."""

import json

import numpy as np
import pytest
from rundir_builder import MONO0, request_records, write_manifest, write_profile

from gate.errors import ExitCode
from gate.gates.file import loads
from gate.gates.spec import Scope, Settings, Slos
from gate.metrics.derive import measure
from gate.metrics.measurements import NoData, Scalar
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Status

SUBMIT_AT = MONO0 + 5.0


def _summary(**fields):
    """A `batch_job` summary (docs/records.md): 100 lines, submitted 5 s in, 40 s to the end."""
    return {
        "status": "completed", "batch_status": "completed", "http_status": None, "error": None,
        "input_file_id": "file-in", "batch_id": "batch-1", "output_file_id": "file-out",
        "error_file_id": None, "lines_total": 100, "lines_completed": 100, "lines_failed": 0,
        "output_tokens": 4000, "submit_planned_at": SUBMIT_AT, "submitted_at": SUBMIT_AT + 0.5,
        "in_progress_at": SUBMIT_AT + 1.0, "completed_at": SUBMIT_AT + 39.0,
        "ended_at": SUBMIT_AT + 40.5, "polls": 70, "duration_seconds": 38.5, **fields,
    }  # fmt: skip


def _offline_job_run(tmp_path, *, job=None, before_ttft=0.1, during_ttft=0.15, n=500):
    """A synthetic offline_job profile: n chats before the job, n during it, like the loadgen's
    before_job / during_job stages; `job` is load.json's `batch_job` (None: no such key)."""
    spacing = 0.01
    ttft = np.r_[np.full(n, before_ttft), np.full(n, during_ttft)]
    records = request_records(
        2 * n,
        profile="offline_job",
        ttft_seconds=ttft,
        spacing_seconds=spacing,
        stage=["before_job"] * n + ["during_job"] * n,
    )
    split, end = MONO0 + n * spacing, MONO0 + 2 * n * spacing
    directory = write_profile(
        tmp_path,
        "offline_job",
        records,
        window=(MONO0, end),
        stages=[
            {"name": "before_job", "start": MONO0, "end": split},
            {"name": "during_job", "start": split, "end": end},
        ],
    )
    if job is not None:
        load_path = directory / "load.json"
        load = json.loads(load_path.read_text())
        load["batch_job"] = job
        load_path.write_text(json.dumps(load))
    write_manifest(tmp_path, ["offline_job"])
    return load_run(tmp_path)


def _measure(run, metric):
    profile = run.profiles["offline_job"]
    return measure(
        profile, metric, "final", Scope(), slos=Slos(), settings=Settings(), warmup_seconds=None
    )


def test_a_completed_job_gives_its_completion_share_failures_seconds_and_token_rate(tmp_path):
    run = _offline_job_run(tmp_path, job=_summary(lines_completed=97, lines_failed=3))
    completed = _measure(run, "batch_job_completed")
    assert isinstance(completed, Scalar) and completed.value == pytest.approx(0.97)
    assert completed.n == 100
    assert _measure(run, "batch_job_failed_lines").value == 3
    assert _measure(run, "batch_job_seconds").value == pytest.approx(40.0)  # submitted -> ended
    assert _measure(run, "batch_job_output_tokens_per_second").value == pytest.approx(100.0)
    assert not _measure(run, "batch_job_seconds").lower_bound


def test_a_profile_without_a_job_is_no_data(tmp_path):
    run = _offline_job_run(tmp_path, job=None)
    for metric in ("batch_job_completed", "batch_job_seconds"):
        result = _measure(run, metric)
        assert isinstance(result, NoData) and result.reason == "no batch job in this profile"


def test_a_target_without_the_batch_api_is_no_data_naming_the_http_status(tmp_path):
    job = _summary(
        status="not_supported", batch_status=None, http_status=404, batch_id=None,
        lines_completed=None, lines_failed=None, output_tokens=None, submitted_at=None,
        error="POST http://t/v1/files: HTTP 404: not found",
    )  # fmt: skip
    run = _offline_job_run(tmp_path, job=job)
    for metric in ("batch_job_completed", "batch_job_failed_lines", "batch_job_seconds"):
        result = _measure(run, metric)
        assert isinstance(result, NoData)
        assert result.reason == "the target has no Batch API (HTTP 404)"


def test_a_timed_out_job_is_measured_as_it_stood_with_a_note(tmp_path):
    job = _summary(
        status="timed_out", batch_status="cancelled", lines_completed=60, lines_failed=0,
        output_tokens=None, completed_at=None,
    )  # fmt: skip
    run = _offline_job_run(tmp_path, job=job)
    completed = _measure(run, "batch_job_completed")
    assert completed.value == pytest.approx(0.6)
    assert "timed out" in completed.note
    seconds = _measure(run, "batch_job_seconds")
    assert seconds.value == pytest.approx(40.0) and seconds.lower_bound  # it would take longer
    tokens = _measure(run, "batch_job_output_tokens_per_second")
    assert isinstance(tokens, NoData) and "timed_out" in tokens.reason


@pytest.mark.parametrize("status", ["error", "interrupted"])
def test_a_job_that_reached_no_outcome_is_no_data_never_a_pass(tmp_path, status):
    job = _summary(status=status, error="ConnectionRefusedError: refused", lines_completed=None)
    result = _measure(_offline_job_run(tmp_path, job=job), "batch_job_completed")
    assert isinstance(result, NoData) and status in result.reason


OFFLINE_JOB_GATES = """\
version: 1
gates:
  - name: chat_during_job
    metric: ttft
    statistic: p90
    scope: {profile: offline_job, stage: during_job}
    relative_to: {scope: {stage: before_job}}
    fail: "< 2x"
  - name: job_completed
    metric: batch_job_completed
    scope: {profile: offline_job}
    fail: "== 1"
"""


def _verdicts(run):
    evaluation = evaluate(run, loads(OFFLINE_JOB_GATES, path="g.yaml"))
    return evaluation, {v.gate: v for v in evaluation.verdicts}


def test_offline_job_gates_pass_when_chat_holds_up_and_the_job_completes(tmp_path):
    evaluation, verdicts = _verdicts(_offline_job_run(tmp_path, job=_summary()))
    ratio = verdicts["chat_during_job"]
    assert ratio.status is Status.PASS
    assert ratio.value == pytest.approx(1.5) and ratio.reference_value == pytest.approx(0.1)
    assert verdicts["job_completed"].status is Status.PASS
    assert evaluation.exit_code is ExitCode.PASSED


def test_offline_job_gates_fail_when_chat_slows_under_the_job_or_the_job_times_out(tmp_path):
    job = _summary(status="timed_out", lines_completed=60, output_tokens=None)
    evaluation, verdicts = _verdicts(_offline_job_run(tmp_path, job=job, during_ttft=0.3))
    assert verdicts["chat_during_job"].status is Status.FAIL
    assert verdicts["chat_during_job"].value == pytest.approx(3.0)
    completed = verdicts["job_completed"]
    assert completed.status is Status.FAIL and completed.value == pytest.approx(0.6)
    assert "timed out" in completed.reason
    assert evaluation.exit_code is ExitCode.FAILED


def test_offline_job_completion_gate_is_no_data_on_a_target_without_the_batch_api(tmp_path):
    job = _summary(status="not_supported", http_status=405, lines_completed=None)
    evaluation, verdicts = _verdicts(_offline_job_run(tmp_path, job=job))
    assert verdicts["job_completed"].status is Status.NO_DATA
    assert "no Batch API (HTTP 405)" in verdicts["job_completed"].reason
    assert verdicts["chat_during_job"].status is Status.PASS  # the chat part still counts
    assert evaluation.exit_code is ExitCode.NO_DATA


CAPACITY_GATE = """\
version: 1
gates:
  - name: job_throughput
    metric: batch_job_output_tokens_per_second
    scope: {profile: offline_job}
    fail: "> 0.25x capacity"
"""


def _with_capacity(run_dir, tokens_per_second):
    capacity = {"short": {"rps": 10.0, "output_tokens_per_second": tokens_per_second}}
    (run_dir / "calibration.json").write_text(
        json.dumps({"schema_version": 1, "capacity": capacity})
    )
    return load_run(run_dir)


@pytest.mark.parametrize(("capacity", "status"), [(300.0, "pass"), (500.0, "fail")])
def test_job_throughput_is_judged_as_a_fraction_of_the_calibrated_capacity(
    tmp_path, capacity, status
):
    # 4000 output tokens in 38.5 s = 103.9 tok/s: over 0.25 x 300 = 75, under 0.25 x 500 = 125.
    _offline_job_run(tmp_path, job=_summary())
    run = _with_capacity(tmp_path, capacity)
    (verdict,) = evaluate(run, loads(CAPACITY_GATE, path="g.yaml")).verdicts
    assert verdict.status.value == status
    assert verdict.threshold_value == pytest.approx(0.25 * capacity)
    assert "0.25x capacity = " in verdict.threshold


def test_a_capacity_gate_without_a_calibrated_capacity_is_no_data(tmp_path):
    run = _offline_job_run(tmp_path, job=_summary())
    (verdict,) = evaluate(run, loads(CAPACITY_GATE, path="g.yaml")).verdicts
    assert verdict.status is Status.NO_DATA
    assert "calibration" in verdict.reason


def test_the_report_draws_the_job_timeline_beside_the_chat_latency(tmp_path):
    from gate.outputs.html.series import profile_figures

    run = _offline_job_run(tmp_path, job=_summary())
    keys = [f.key for f in profile_figures(run.profiles["offline_job"])]
    assert "job" not in keys  # no batch_job.jsonl: no timeline to draw
    events = [
        {"event": "submitted", "monotonic": SUBMIT_AT + 0.5,
         "request_counts": {"total": 100, "completed": 0, "failed": 0}},
        {"event": "poll", "monotonic": SUBMIT_AT + 20.0,
         "request_counts": {"total": 100, "completed": 40, "failed": 1}},
        {"event": "poll", "monotonic": SUBMIT_AT + 39.0,
         "request_counts": {"total": 100, "completed": 99, "failed": 1}},
        {"event": "summary", **_summary()},
    ]  # fmt: skip
    path = tmp_path / "offline_job" / "batch_job.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    figures = profile_figures(load_run(tmp_path).profiles["offline_job"])
    keys = [f.key for f in figures]
    assert keys.index("job") == keys.index("rolling-ttft") + 1
    job = figures[keys.index("job")]
    completed = next(line for line in job.lines if line.label == "lines completed")
    assert completed.y.tolist() == [0.0, 40.0, 99.0]
    assert completed.x[0] == pytest.approx(5.5)  # seconds since the window start
    assert any(b.label == "job running" for b in job.bands)
    assert job.note.startswith("job completed, 100 lines sent")
