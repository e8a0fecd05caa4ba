"""The offline job's metrics, from load.json's `batch_job` summary (docs/records.md).

Owns the formulas of `batch_job_completed` (lines completed / lines sent), `batch_job_failed_lines`,
`batch_job_seconds` (submitted -> the job driver ended) and `batch_job_output_tokens_per_second`
(output tokens over those seconds), and what each job outcome means for them: a profile without a
job and a target without the Batch API are no data; a job that timed out is measured as it stood
(a completed share under 1 fails a completion gate), with a note. It does not read batch_job.jsonl
(the summary is its last line) nor know thresholds or verdicts.
"""

from __future__ import annotations

from typing import Any

from gate.metrics.measurements import Measurement, NoData, Scalar

__all__ = ["BATCH_JOB_METRICS", "batch_job"]

BATCH_JOB_METRICS = (
    "batch_job_completed",
    "batch_job_failed_lines",
    "batch_job_seconds",
    "batch_job_output_tokens_per_second",
)
# Outcomes that say how far the job got; the others ("error", "interrupted", "pending") do not.
_MEASURED = ("completed", "failed", "expired", "cancelled", "timed_out")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _seconds(job: dict[str, Any]) -> float | None:
    start, end = _number(job.get("submitted_at")), _number(job.get("ended_at"))
    return None if start is None or end is None or end < start else end - start


def batch_job(load: dict[str, Any], metric: str) -> Measurement:
    """One `batch_job_*` metric of a profile whose load.json is `load`."""
    job = load.get("batch_job")
    if not isinstance(job, dict):
        return NoData(reason="no batch job in this profile")
    status = job.get("status")
    if status == "not_supported":
        return NoData(reason=f"the target has no Batch API (HTTP {job.get('http_status')})")
    if status not in _MEASURED:
        detail = f": {job['error']}" if job.get("error") else ""
        return NoData(reason=f"the batch job did not run to an outcome ({status}{detail})")
    timed_out = status == "timed_out"
    note = None if status == "completed" else f"the batch job ended {status}"
    if timed_out:
        note = (
            "the batch job timed out (no terminal status by the chat's end + job_wait_seconds)"
            " and was cancelled; measured as it stood"
        )
    if metric in ("batch_job_completed", "batch_job_failed_lines"):
        key = "lines_completed" if metric == "batch_job_completed" else "lines_failed"
        lines, total = _number(job.get(key)), _number(job.get("lines_total"))
        if lines is None:
            return NoData(reason=f"the target reported no request_counts for the job ({status})")
        if metric == "batch_job_failed_lines":
            return Scalar(value=lines, note=note)
        if not total:
            return NoData(reason="the batch job sent no lines (lines_total)")
        return Scalar(value=lines / total, n=int(total), note=note)
    seconds = _seconds(job)
    if seconds is None:
        return NoData(reason=f"the batch job has no submitted_at .. ended_at span ({status})")
    if metric == "batch_job_seconds":
        # Cut off by the wait: the job would have taken at least this long.
        return Scalar(value=seconds, note=note, lower_bound=timed_out)
    tokens = _number(job.get("output_tokens"))
    if tokens is None:
        return NoData(
            reason=f"no output tokens for the job ({status}: its output file was not read"
            " or not in OpenAI's shape)"
        )
    if seconds <= 0:
        return NoData(reason="the batch job's span is zero seconds")
    return Scalar(value=tokens / seconds, note=note)
