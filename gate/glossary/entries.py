"""Every gateable metric's glossary entry (docs/gates.md lists the same, generated from here).

Owns the data: per metric, its source, shape, unit, the statistics that fit it, the scope keys
that apply, its description, and the Prometheus histogram that estimates it when exact samples
are absent. Types are in `gate.glossary.metric`; lookup in `gate.glossary`.
"""

from __future__ import annotations

from gate.glossary.metric import PERCENTILES, SCOPE_KEYS, Metric, Shape, Source
from gate.units import UnitKind

__all__ = ["ENTRIES"]

_SAMPLE_STATS = (*PERCENTILES, "max", "mean")
_CLIENT_SCOPES = frozenset(SCOPE_KEYS)
_WINDOW_SCOPES = frozenset({"profile", "stage"})
_PROFILE_SCOPE = frozenset({"profile"})


def _m(**kwargs: object) -> Metric:
    return Metric(**kwargs)  # type: ignore[arg-type]


ENTRIES: tuple[Metric, ...] = (
    _m(
        name="ttft",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description=(
            "request sent -> first chunk carrying generated tokens of either kind: reasoning "
            "(delta.reasoning_content / delta.reasoning) or answer (delta.content)"
        ),
    ),
    _m(
        name="ttfc",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description=(
            "request sent -> first chunk carrying answer content (delta.content), after any "
            "reasoning; equals ttft for a request that does not think"
        ),
    ),
    _m(
        name="reasoning_tokens",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.COUNT,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description=(
            "reasoning tokens per ok request (usage.completion_tokens_details.reasoning_tokens, "
            "else counted from the reasoning chunks)"
        ),
    ),
    _m(
        name="answer_mismatch_rate",
        source=Source.CLIENT,
        shape=Shape.SCALAR,
        unit=UnitKind.RATIO,
        statistics=("final",),
        scopes=_WINDOW_SCOPES,
        warn_only_on_foreign=True,
        description=(
            "share of the consistency probes (greedy, and seeded at temperature > 0) sent "
            "during the profile whose answer differs from the same probe answered alone"
        ),
    ),
    _m(
        name="answer_divergence_position",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.COUNT,
        statistics=_SAMPLE_STATS,
        scopes=_WINDOW_SCOPES,
        description=(
            "per probe whose answer differed: the first character where it left the answer "
            "given alone (tokens on a byte-level tokenizer such as the bundled server's)"
        ),
    ),
    _m(
        name="ttft_from_planned",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="planned send time -> first content chunk (exposes client lag)",
    ),
    _m(
        name="e2e",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="request sent -> end of stream, ok requests only",
    ),
    _m(
        name="e2e_from_planned",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="planned send time -> end of stream, ok requests only",
    ),
    _m(
        name="itl",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="gaps between content chunks, per token, pooled over requests",
    ),
    _m(
        name="tpot",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="per request (done - first token) / (output_tokens - 1)",
    ),
    _m(
        name="schedule_lag",
        source=Source.CLIENT,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_CLIENT_SCOPES,
        description="sent_at - planned_at: how late the client sent",
    ),
    _m(
        name="goodput",
        source=Source.CLIENT,
        shape=Shape.EVENTS,
        unit=UnitKind.RATIO,
        statistics=("mean", "rate", "count"),
        scopes=_CLIENT_SCOPES,
        higher_is_better=True,
        description="ok requests meeting every per-request SLO, over all requests",
    ),
    _m(
        name="errors",
        source=Source.CLIENT,
        shape=Shape.EVENTS,
        unit=UnitKind.RATIO,
        statistics=("mean", "rate", "count"),
        scopes=_CLIENT_SCOPES,
        description="requests whose status is not ok (mean = error rate)",
    ),
    _m(
        name="http_5xx",
        source=Source.CLIENT,
        shape=Shape.EVENTS,
        unit=UnitKind.RATIO,
        statistics=("mean", "rate", "count"),
        scopes=_CLIENT_SCOPES,
        description="responses with an HTTP status of 500..599",
    ),
    _m(
        name="requests",
        source=Source.CLIENT,
        shape=Shape.EVENTS,
        unit=UnitKind.RATIO,
        statistics=("rate", "count", "mean"),
        scopes=_CLIENT_SCOPES,
        higher_is_better=True,
        description="ok requests: throughput (rate) or share of all requests (mean)",
    ),
    _m(
        name="output_tokens",
        source=Source.CLIENT,
        shape=Shape.EVENTS,
        unit=UnitKind.COUNT,
        statistics=("rate", "count", "mean"),
        scopes=_CLIENT_SCOPES,
        higher_is_better=True,
        description="output tokens of ok requests: tokens/s (rate), total, mean per request",
    ),
    _m(
        name="recovery_time",
        source=Source.CLIENT,
        shape=Shape.SCALAR,
        unit=UnitKind.DURATION,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        description="end of the spike stage -> rolling p99 TTFT back within a factor of before",
    ),
    _m(
        name="step_latency",
        source=Source.SERVER,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=_SAMPLE_STATS,
        scopes=_WINDOW_SCOPES,
        histogram="step_duration_seconds",
        description="wall time of one engine step (exact from steps, else histogram estimate)",
    ),
    _m(
        name="server_ttft",
        source=Source.SERVER,
        shape=Shape.SAMPLES,
        unit=UnitKind.DURATION,
        statistics=(*PERCENTILES, "mean"),
        scopes=_WINDOW_SCOPES,
        histogram="ttft_seconds",
        description="server-side time to first token (histogram estimate)",
    ),
    _m(
        name="recompute_ratio",
        source=Source.SERVER,
        shape=Shape.SCALAR,
        unit=UnitKind.RATIO,
        statistics=("final",),
        scopes=_WINDOW_SCOPES,
        description="prefill tokens recomputed after preemption / all prefill tokens",
    ),
    _m(
        name="prefix_cache_hit_ratio",
        source=Source.SERVER,
        shape=Shape.SCALAR,
        unit=UnitKind.RATIO,
        statistics=("final",),
        scopes=_WINDOW_SCOPES,
        description=(
            "prompt tokens served from the prefix cache / prompt tokens looked up (vLLM's "
            'prefix_cache_hits / queries), over the window; "> 0.8x ideal" compares it with '
            "the replayed trace's ideal"
        ),
    ),
    _m(
        name="preemptions",
        source=Source.SERVER,
        shape=Shape.COUNTER,
        unit=UnitKind.COUNT,
        statistics=("delta", "rate"),
        scopes=_WINDOW_SCOPES,
        description="preemptions in the window",
    ),
    _m(
        name="preemptions_per_request",
        source=Source.SERVER,
        shape=Shape.SCALAR,
        unit=UnitKind.COUNT,
        statistics=("final",),
        scopes=_WINDOW_SCOPES,
        description="preemptions in the window / requests sent in it",
    ),
    _m(
        name="kv_usage",
        source=Source.SERVER,
        shape=Shape.SERIES,
        unit=UnitKind.RATIO,
        statistics=("peak", "mean", "final"),
        scopes=_WINDOW_SCOPES,
        description="used KV blocks / total KV blocks",
    ),
    _m(
        name="kv_leak_after_drain",
        source=Source.SERVER,
        shape=Shape.SCALAR,
        unit=UnitKind.COUNT,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        description="KV blocks still in use once the load ended and nothing is in flight",
    ),
    _m(
        name="queue_length",
        source=Source.SERVER,
        shape=Shape.SERIES,
        unit=UnitKind.COUNT,
        statistics=("peak", "mean", "final"),
        scopes=frozenset({"profile", "stage", "priority"}),
        description="waiting requests (per priority class with a priority scope)",
    ),
    _m(
        name="running_requests",
        source=Source.SERVER,
        shape=Shape.SERIES,
        unit=UnitKind.COUNT,
        statistics=("peak", "mean", "final"),
        scopes=frozenset({"profile", "stage", "priority"}),
        description="requests in the running batch",
    ),
    _m(
        name="memory_used",
        source=Source.GPU,
        shape=Shape.SERIES,
        unit=UnitKind.BYTES,
        statistics=("peak", "mean", "final"),
        scopes=_WINDOW_SCOPES,
        description=(
            "device memory used (NVML), or the server's resident memory without a GPU (its PID,"
            " else its own process_resident_memory_bytes)"
        ),
    ),
    _m(
        name="gpu_utilization",
        source=Source.GPU,
        shape=Shape.SERIES,
        unit=UnitKind.RATIO,
        statistics=("mean", "peak"),
        scopes=_WINDOW_SCOPES,
        description="NVML utilization",
    ),
    _m(
        name="measurement_valid",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.COUNT,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        description="1 when load.json says measurement_valid and the run completed, else 0",
    ),
    _m(
        name="client_cpu",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.RATIO,
        statistics=("mean", "max"),
        scopes=_PROFILE_SCOPE,
        description="load process CPU, fraction of one core (load.json)",
    ),
    _m(
        name="achieved_rate",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.RATE,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        higher_is_better=True,
        description="sent requests / window length (load.json)",
    ),
    _m(
        name="batch_job_completed",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.RATIO,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        higher_is_better=True,
        description="offline job: lines completed / lines sent (load.json batch_job)",
    ),
    _m(
        name="batch_job_failed_lines",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.COUNT,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        description="offline job: lines the server counted failed (load.json batch_job)",
    ),
    _m(
        name="batch_job_seconds",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.DURATION,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        description="offline job: submitted -> job driver ended (load.json batch_job)",
    ),
    _m(
        name="batch_job_output_tokens_per_second",
        source=Source.RUN,
        shape=Shape.SCALAR,
        unit=UnitKind.RATE,
        statistics=("final",),
        scopes=_PROFILE_SCOPE,
        higher_is_better=True,
        description="offline job: output tokens / batch_job_seconds (load.json batch_job)",
    ),
)
