"""The JSON shapes of the run directory's files (docs/records.md), checked where they are read.

Owns the shape of each file a reader of the run directory takes whole: `manifest.json`,
`load.json`, `verdicts.json`, and one line of `scrapes.jsonl`, in `gate.json_shapes`' vocabulary;
the readers prefix the file to `problem`'s `field: what is wrong` and refuse the run (exit 5).
calibration.json's shape is the calibration stage's (`gate.calibration.content`). It does not
read files.
"""

from __future__ import annotations

from gate.json_shapes import (
    ANY,
    BOOL,
    COUNT,
    NUMBER,
    OPT_COUNT,
    OPT_NUMBER,
    OPT_TEXT,
    TEXT,
    listing,
    mapping,
    nullable,
    obj,
    oneof,
)

__all__ = ["LOAD", "MANIFEST", "SCRAPE", "VERDICTS", "VERDICT_KEYS"]

# manifest.json (docs/records.md); free-form parts (settings, params) are `any` object.
MANIFEST = obj(
    schema_version=COUNT,
    tool=obj(version=OPT_TEXT, git_sha=OPT_TEXT),
    target=obj(
        url=OPT_TEXT,
        server_kind=OPT_TEXT,
        model=OPT_TEXT,
        version=OPT_TEXT,
        server_version=OPT_TEXT,
        batching=nullable(mapping(ANY)),
        batching_hash=OPT_TEXT,
        refused_fields=listing(TEXT),
        fields_check=OPT_TEXT,
    ),
    hardware=nullable(obj(cpu=OPT_TEXT, cpu_count=OPT_COUNT, gpu=OPT_TEXT, driver=OPT_TEXT)),
    profiles=mapping(
        obj(
            params=nullable(mapping(ANY)),
            params_hash=OPT_TEXT,
            overrides=nullable(mapping(ANY)),
            aborted_by_gate=OPT_TEXT,
        )
    ),
    profiles_not_run=listing(TEXT),
    gates_file=OPT_TEXT,
    gates_hash=OPT_TEXT,
    gates_not_measurable=mapping(TEXT),
    started_at=OPT_TEXT,
    ended_at=OPT_TEXT,
    scale=OPT_TEXT,
    preset=OPT_TEXT,
    ended=TEXT,
    reason=OPT_TEXT,
)

_STAGE = obj(name=TEXT, start=NUMBER, end=NUMBER)
_BATCH_JOB = obj(
    status=TEXT,
    batch_status=OPT_TEXT,
    http_status=OPT_COUNT,
    error=OPT_TEXT,
    lines_total=OPT_COUNT,
    lines_completed=OPT_COUNT,
    lines_failed=OPT_COUNT,
    output_tokens=OPT_COUNT,
    submit_planned_at=OPT_NUMBER,
    submitted_at=OPT_NUMBER,
    in_progress_at=OPT_NUMBER,
    completed_at=OPT_NUMBER,
    ended_at=OPT_NUMBER,
    polls=OPT_COUNT,
    duration_seconds=OPT_NUMBER,
)
# load.json (docs/records.md).
LOAD = obj(
    schema_version=COUNT,
    profile=TEXT,
    params=mapping(ANY),
    params_hash=OPT_TEXT,
    mode=TEXT,
    workers=COUNT,
    clock=obj(monotonic_at_start=NUMBER, wall_at_start=NUMBER),
    window=obj(start=NUMBER, end=NUMBER, warmup_seconds=OPT_NUMBER),
    stages=listing(_STAGE),
    target_rate_rps=OPT_NUMBER,
    achieved_rate_rps=NUMBER,
    planned_requests=COUNT,
    sent_requests=COUNT,
    counts_by_status=mapping(COUNT),
    chunk_tokens_sources=mapping(COUNT),
    schedule_lag_seconds=mapping(NUMBER),
    client_cpu_ratio=mapping(NUMBER),
    concurrency_cap=COUNT,
    cap_reached_count=COUNT,
    streams_ended_without_done=OPT_COUNT,  # absent in runs before it was counted
    dropped_fields=listing(TEXT),
    limits=mapping(NUMBER),
    measurement_valid=BOOL,
    invalid_reasons=listing(TEXT),
    ended=TEXT,
    batch_job=_BATCH_JOB,
    trace=obj(
        path=OPT_TEXT,
        format=OPT_TEXT,
        requests=COUNT,
        time_scale=OPT_NUMBER,
        duration_seconds=OPT_NUMBER,
        offered_output_tokens_per_second=OPT_NUMBER,
        max_input_tokens=OPT_COUNT,
        max_output_tokens=OPT_COUNT,
        input_clamped=COUNT,
        output_clamped=COUNT,
        output_lengths_exact=BOOL,
    ),
)

_VERDICT = obj(
    gate=TEXT,
    profile=OPT_TEXT,
    status=TEXT,
    metric=TEXT,
    statistic=TEXT,
    unit=TEXT,
    scope=mapping(nullable(listing(TEXT))),
    value=OPT_NUMBER,
    threshold=OPT_TEXT,
    threshold_value=OPT_NUMBER,
    margin=OPT_NUMBER,
    n=COUNT,
    interval=nullable(listing(OPT_NUMBER)),
    confidence=NUMBER,
    reason=TEXT,
    estimate=BOOL,
    of_total=BOOL,
    monitor=BOOL,
    key=BOOL,
    knob=OPT_TEXT,
    rollback=OPT_TEXT,
    baseline_value=OPT_NUMBER,
    baseline_delta_ratio=OPT_NUMBER,
    reference_value=OPT_NUMBER,
    notes=listing(TEXT),
)
# verdicts.json (docs/report.md).
VERDICTS = obj(
    schema_version=COUNT,
    exit_code=COUNT,
    inconclusive_policy=TEXT,
    confidence=NUMBER,
    run_path=OPT_TEXT,
    gates_file=OPT_TEXT,
    baseline=OPT_TEXT,
    notes=listing(TEXT),
    rollback_target=OPT_TEXT,
    verdicts=listing(_VERDICT),
)
# Keys a verdict must have (`gate.verdicts.verdict.Verdict` has no default for them).
VERDICT_KEYS = ("gate", "profile", "status", "metric", "statistic", "unit", "scope")

_HISTOGRAM = obj(buckets=mapping(NUMBER), sum=NUMBER, count=NUMBER)
# One scrapes.jsonl line: a metric's value is a number, a {class: number} map or a histogram.
SCRAPE = obj(
    t=NUMBER,
    phase=TEXT,
    ok=BOOL,
    error=OPT_TEXT,
    server_kind=OPT_TEXT,
    metrics=mapping(oneof(NUMBER, mapping(NUMBER), _HISTOGRAM)),
    unavailable=listing(TEXT),
)
