"""Request records: the `requests.jsonl` line format of docs/records.md, its writer and validator.

Owns `RequestRecord`, the line-flushed `RecordWriter` (every finished request is on disk at once,
so a crash or Ctrl-C loses nothing finished; at a clean close it adds `requests.parquet` through
`loadgen.parquet`), and `validate_record` / `validate_load_json`, which
check objects against docs/records.md and are used by the tests. It does not compute derived
metrics: their one formula each is the gate's (docs/records.md).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from batchgate_records.schema import parquet_path
from loadgen.parquet import write_parquet

__all__ = [
    "BATCH_JOB_STATUSES",
    "CHUNK_TOKENS_SOURCES",
    "STATUSES",
    "RecordWriter",
    "RequestRecord",
    "validate_load_json",
    "validate_record",
]

STATUSES = ("ok", "http_error", "timeout", "connection_error", "protocol_error", "cancelled")
# Where a record's `chunk_tokens` come from: the target's cumulative usage on every content chunk,
# on some of them, or on none (then each chunk counts as one token and ITL is per chunk).
CHUNK_TOKENS_SOURCES = ("usage", "mixed", "assumed")


@dataclass(kw_only=True)
class RequestRecord:
    id: str
    profile: str
    stage: str
    priority: str
    length_class: str
    endpoint: str
    stream: bool
    max_tokens: int
    planned_at: float
    sent_at: float | None = None
    first_token_at: float | None = None
    done_at: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_tokens_source: str = "assumed"
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: str = "counted"
    status: str = "ok"
    http_status: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    worker: int = 0
    # Production-traffic fields (docs/records.md): prompt tokens the target served from its
    # prefix cache (usage.prompt_tokens_details.cached_tokens; null when it does not say), the
    # conversation and 0-based turn of a multi-turn request, the trace line replayed.
    cached_tokens: int | None = None
    session: str | None = None
    turn: int | None = None
    trace_index: int | None = None
    # Reasoning models (docs/records.md): when the first reasoning token (`delta.reasoning_content`
    # or `delta.reasoning`) and the first answer token (`delta.content`) arrived, and how many
    # reasoning tokens the answer held (usage.completion_tokens_details.reasoning_tokens, else
    # counted from the reasoning chunks; 0 when none was streamed).
    first_reasoning_at: float | None = None
    first_content_at: float | None = None
    reasoning_tokens: int | None = None
    # An answer-consistency probe (loadgen.probes): its index in the probe set, and its answer
    # text, compared by the gate with the same probe answered alone. Null on other requests.
    probe: int | None = None
    probe_answer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # Written out by hand: dataclasses.asdict deep-copies and costs more than the request.
        return {
            "id": self.id,
            "profile": self.profile,
            "stage": self.stage,
            "priority": self.priority,
            "length_class": self.length_class,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "max_tokens": self.max_tokens,
            "planned_at": self.planned_at,
            "sent_at": self.sent_at,
            "first_token_at": self.first_token_at,
            "done_at": self.done_at,
            "chunk_times": [round(t, 6) for t in self.chunk_times],
            "chunk_tokens": list(self.chunk_tokens),
            "chunk_tokens_source": self.chunk_tokens_source,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "tokens_source": self.tokens_source,
            "status": self.status,
            "http_status": self.http_status,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "worker": self.worker,
            "cached_tokens": self.cached_tokens,
            "session": self.session,
            "turn": self.turn,
            "trace_index": self.trace_index,
            "first_reasoning_at": self.first_reasoning_at,
            "first_content_at": self.first_content_at,
            "reasoning_tokens": self.reasoning_tokens,
            "probe": self.probe,
            "probe_answer": self.probe_answer,
        }


class RecordWriter:
    """Appends one JSON line per record and flushes it; ids already written are skipped.

    With `parquet` (the default), closing also converts the file into `requests.parquet`
    (docs/records.md), so readers and users' tools need not parse a large JSONL. The conversion
    reads the closed file back: nothing is kept in memory per request during the run, and the
    Parquet file holds exactly what the JSONL says.
    """

    def __init__(self, path: str | Path, *, parquet: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One from before would no longer match once a line is added (readers would skip it).
        parquet_path(self.path).unlink(missing_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._ids: set[str] = set()
        self.count = 0
        self._parquet = parquet

    def write(self, record: RequestRecord | dict[str, Any]) -> bool:
        obj = record.to_dict() if isinstance(record, RequestRecord) else record
        if obj["id"] in self._ids or self._file is None:
            return False
        self._ids.add(obj["id"])
        self._file.write(orjson.dumps(obj).decode() + "\n")
        self._file.flush()
        self.count += 1
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            if self._parquet:
                # None on failure: the JSONL is complete without it; readers convert it then.
                write_parquet(self.path)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_RECORD_TYPES: dict[str, tuple[str, bool]] = {
    # field: (type, nullable)
    "id": ("str", False),
    "profile": ("str", False),
    "stage": ("str", False),
    "priority": ("str", False),
    "length_class": ("str", False),
    "endpoint": ("str", False),
    "stream": ("bool", False),
    "max_tokens": ("int", False),
    "planned_at": ("num", False),
    "sent_at": ("num", True),
    "first_token_at": ("num", True),
    "done_at": ("num", True),
    "chunk_times": ("list_num", False),
    "chunk_tokens": ("list_int", False),
    "chunk_tokens_source": ("str", False),
    "prompt_tokens": ("int", True),
    "output_tokens": ("int", True),
    "tokens_source": ("str", False),
    "status": ("str", False),
    "http_status": ("int", True),
    "finish_reason": ("str", True),
    "error": ("str", True),
    "worker": ("int", False),
    "cached_tokens": ("int", True),
    "session": ("str", True),
    "turn": ("int", True),
    "trace_index": ("int", True),
    "first_reasoning_at": ("num", True),
    "first_content_at": ("num", True),
    "reasoning_tokens": ("int", True),
    "probe": ("int", True),
    "probe_answer": ("str", True),
}
# Added after the first release: a line without them is valid (older records).
_OPTIONAL_RECORD_FIELDS = frozenset(
    {
        "cached_tokens", "session", "turn", "trace_index", "first_reasoning_at",
        "first_content_at", "reasoning_tokens", "probe", "probe_answer",
    }
)  # fmt: skip
LENGTH_CLASSES = ("short", "long", "thinking")

_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": _is_int,
    "num": _is_num,
    "list_num": lambda v: isinstance(v, list) and all(_is_num(x) for x in v),
    "list_int": lambda v: isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v),
}


def validate_record(obj: Any) -> list[str]:
    """Problems of one `requests.jsonl` object against docs/records.md; empty when valid."""
    if not isinstance(obj, dict):
        return ["record is not a JSON object"]
    problems = [
        f"missing field {k!r}"
        for k in _RECORD_TYPES
        if k not in obj and k not in _OPTIONAL_RECORD_FIELDS
    ]
    problems += [f"unknown field {k!r}" for k in obj if k not in _RECORD_TYPES]
    for key, (kind, nullable) in _RECORD_TYPES.items():
        if key not in obj or (nullable and obj[key] is None):
            continue
        if not _CHECKS[kind](obj[key]):
            problems.append(f"field {key!r} has wrong type: {obj[key]!r}")
    if problems:
        return problems
    if obj["status"] not in STATUSES:
        problems.append(f"status {obj['status']!r} not one of {STATUSES}")
    if obj["priority"] not in ("interactive", "batch"):
        problems.append(f"priority {obj['priority']!r} not interactive|batch")
    if obj["length_class"] not in LENGTH_CLASSES:
        problems.append(f"length_class {obj['length_class']!r} not short|long|thinking")
    if obj["endpoint"] not in ("chat", "completions"):
        problems.append(f"endpoint {obj['endpoint']!r} not chat|completions")
    if obj["tokens_source"] not in ("usage", "counted"):
        problems.append(f"tokens_source {obj['tokens_source']!r} not usage|counted")
    if obj["chunk_tokens_source"] not in CHUNK_TOKENS_SOURCES:
        problems.append(
            f"chunk_tokens_source {obj['chunk_tokens_source']!r} not one of {CHUNK_TOKENS_SOURCES}"
        )
    if len(obj["chunk_times"]) != len(obj["chunk_tokens"]):
        problems.append("chunk_times and chunk_tokens differ in length")
    if obj["status"] == "ok":
        # an ok answer may carry no content at all; with content it has a first token
        needed = (
            ("sent_at", "done_at", "first_token_at")
            if obj["chunk_times"]
            else ("sent_at", "done_at")
        )
        for key in needed:
            if obj[key] is None:
                problems.append(f"ok record without {key}")
        if obj["error"] is not None:
            problems.append("ok record with an error")
    elif not obj["error"]:
        problems.append(f"{obj['status']} record without an error reason")
    clocks = [obj[k] for k in ("sent_at", "first_token_at", "done_at") if obj[k] is not None]
    if obj["sent_at"] is not None and any(c < obj["sent_at"] for c in clocks):
        problems.append("a clock is earlier than sent_at")
    if obj["sent_at"] is None and (obj["first_token_at"] is not None):
        problems.append("first_token_at without sent_at")
    times = obj["chunk_times"]
    if any(b < a for a, b in itertools.pairwise(times)):
        problems.append("chunk_times are not increasing")
    if times and obj["first_token_at"] is not None and abs(times[0] - obj["first_token_at"]) > 1e-5:
        problems.append("first_token_at differs from the first chunk time")
    return problems + _reasoning_problems(obj)


def _reasoning_problems(obj: dict[str, Any]) -> list[str]:
    """TTFT is the first token of either kind: the first reasoning or answer token, whichever
    came first, is `first_token_at`; neither comes before the send."""
    firsts = [obj.get(k) for k in ("first_reasoning_at", "first_content_at")]
    firsts = [t for t in firsts if t is not None]
    problems = []
    first = obj["first_token_at"]
    if firsts and first is not None and abs(min(firsts) - first) > 1e-5:
        problems.append("first_token_at is not the first reasoning or content token")
    if firsts and (obj["sent_at"] is None or min(firsts) < obj["sent_at"]):
        problems.append("a first reasoning or content token before sent_at")
    if (obj.get("reasoning_tokens") or 0) < 0:
        problems.append("reasoning_tokens is negative")
    if obj.get("probe") is not None and obj["probe"] < 0:
        problems.append("probe is negative")
    if obj.get("probe") is None and obj.get("probe_answer") is not None:
        problems.append("probe_answer on a record that is not a probe")
    return problems


_LOAD_KEYS = {
    "schema_version",
    "profile",
    "params",
    "params_hash",
    "mode",
    "workers",
    "clock",
    "window",
    "stages",
    "target_rate_rps",
    "achieved_rate_rps",
    "planned_requests",
    "sent_requests",
    "counts_by_status",
    "chunk_tokens_sources",
    "schedule_lag_seconds",
    "client_cpu_ratio",
    "concurrency_cap",
    "cap_reached_count",
    "limits",
    "measurement_valid",
    "invalid_reasons",
    "ended",
}


def validate_load_json(obj: Any) -> list[str]:
    """Problems of a `load.json` object against docs/records.md; empty when valid."""
    if not isinstance(obj, dict):
        return ["load.json is not a JSON object"]
    problems = [f"missing key {k!r}" for k in sorted(_LOAD_KEYS - set(obj))]
    optional = {"batch_job", "trace", "streams_ended_without_done", "dropped_fields"}
    problems += [f"unknown key {k!r}" for k in sorted(set(obj) - _LOAD_KEYS - optional)]
    if problems:
        return problems
    if obj["schema_version"] != 1:
        problems.append("schema_version must be 1")
    if obj["mode"] not in ("open", "closed"):
        problems.append(f"mode {obj['mode']!r} not open|closed")
    if obj["ended"] not in ("completed", "interrupted", "crashed"):
        problems.append(f"ended {obj['ended']!r} not completed|interrupted|crashed")
    if set(obj["clock"]) != {"monotonic_at_start", "wall_at_start"}:
        problems.append("clock needs exactly monotonic_at_start and wall_at_start")
    if set(obj["window"]) != {"start", "end", "warmup_seconds"}:
        problems.append("window needs exactly start, end, warmup_seconds")
    for stage in obj["stages"]:
        if not isinstance(stage, dict) or set(stage) != {"name", "start", "end"}:
            problems.append(f"stage {stage!r} needs exactly name, start, end")
    for key in ("p50", "p90", "p99", "max"):
        if key not in obj["schedule_lag_seconds"]:
            problems.append(f"schedule_lag_seconds lacks {key}")
    if set(obj["client_cpu_ratio"]) != {"mean", "max"}:
        problems.append("client_cpu_ratio needs exactly mean and max")
    for status in obj["counts_by_status"]:
        if status not in STATUSES:
            problems.append(f"counts_by_status has unknown status {status!r}")
    sources = obj["chunk_tokens_sources"]
    if not isinstance(sources, dict) or any(
        k not in CHUNK_TOKENS_SOURCES or not _is_int(v) or v < 0 for k, v in sources.items()
    ):
        problems.append(f"chunk_tokens_sources needs counts under {CHUNK_TOKENS_SOURCES}")
    if not isinstance(obj["measurement_valid"], bool):
        problems.append("measurement_valid must be a bool")
    if obj["measurement_valid"] and obj["invalid_reasons"]:
        problems.append("a valid measurement must not list invalid_reasons")
    if not obj["measurement_valid"] and not obj["invalid_reasons"]:
        problems.append("an invalid measurement must give its reasons")
    dropped = obj.get("dropped_fields", [])
    if not isinstance(dropped, list) or not all(isinstance(f, str) for f in dropped):
        problems.append("dropped_fields must be a list of field names")
    if "batch_job" in obj:  # the offline_job profile only
        problems += _batch_job_problems(obj["batch_job"])
    return problems


# load.json's `batch_job` (docs/records.md): the summary line of batch_job.jsonl without its
# event and clock fields, plus duration_seconds.
_BATCH_JOB_KEYS = {
    "status", "batch_status", "http_status", "error", "input_file_id", "batch_id",
    "output_file_id", "error_file_id", "lines_total", "lines_completed", "lines_failed",
    "output_tokens", "submit_planned_at", "submitted_at", "in_progress_at", "completed_at",
    "ended_at", "polls", "duration_seconds",
}  # fmt: skip
BATCH_JOB_STATUSES = (
    "completed", "failed", "expired", "cancelled", "timed_out", "not_supported", "error",
    "interrupted",
)  # fmt: skip


def _batch_job_problems(job: Any) -> list[str]:
    if not isinstance(job, dict):
        return ["batch_job is not a JSON object"]
    problems = [f"batch_job lacks {k!r}" for k in sorted(_BATCH_JOB_KEYS - set(job))]
    problems += [f"batch_job has unknown key {k!r}" for k in sorted(set(job) - _BATCH_JOB_KEYS)]
    if job.get("status") not in BATCH_JOB_STATUSES:
        problems.append(f"batch_job status {job.get('status')!r} not one of {BATCH_JOB_STATUSES}")
    if job.get("status") == "not_supported" and not _is_int(job.get("http_status")):
        problems.append("a not_supported batch_job needs its http_status")
    return problems
