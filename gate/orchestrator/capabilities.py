"""Which gates a target can measure at all, from what it told the start-of-run look.

Owns the rule "a server-side gate needs these scrape names, or the bundled server's step records"
per glossary metric, turned into a reason when the target has neither (a server without /metrics,
or one whose name map marks the names not exposed: vLLM has no recomputed-token counter, no count
of KV blocks in use), the rule that the offline job's gates need the OpenAI Batch API, and the
rule that gates judging thinking requests need a target that lets a request turn thinking on
(one that refuses `chat_template_kwargs` sends the reasoning mix's thinking requests as plain
chat: their gates would compare chat with chat). Other client-side, run and sampler gates are
always measurable here. It does not drop gates
(`gate.orchestrator.suite`) or judge them.
"""

from __future__ import annotations

from gate import glossary
from gate.gates.spec import Gate
from gate.orchestrator.target import TargetInfo

__all__ = [
    "BATCH_API_PROFILES",
    "SERVER_METRIC_FALLBACKS",
    "SERVER_METRIC_NEEDS",
    "THINKING_PROFILES",
    "THINKING_SWITCHES",
    "unmeasurable_reason",
]

# Glossary metric -> (scrape names that must all be available, whether step records suffice).
SERVER_METRIC_NEEDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "kv_leak_after_drain": (("kv_blocks_used",), False),
    "step_latency": (("step_duration_seconds",), True),
    "server_ttft": (("ttft_seconds",), False),
    "recompute_ratio": (("recomputed_tokens_total", "prefill_tokens_total"), True),
    "preemptions": (("preemptions_total",), True),
    "prefix_cache_hit_ratio": (("prefix_cache_hits_total", "prefix_cache_queries_total"), False),
    "preemptions_per_request": (("preemptions_total",), True),
    "kv_usage": (("kv_usage_ratio",), True),
    "queue_length": (("num_requests_waiting",), True),
    "running_requests": (("num_requests_running",), True),
}


# A scrape name that stands in when the needs are missing: SGLang's hit-rate gauge (an estimate)
# for the hit ratio it has no query counter for.
SERVER_METRIC_FALLBACKS: dict[str, str] = {"prefix_cache_hit_ratio": "prefix_cache_hit_rate"}


# The load generator's profile that submits a Batch API job (the gate package does not import
# loadgen): on a target without /v1/batches its chat ratio would compare chat with chat and
# pass without a job ever running, so its gates are not measurable there, like the job's own.
BATCH_API_PROFILES = ("offline_job",)


# The profile whose thinking requests (length class `thinking`, stage `with_thinking`) ask the
# target to think, and the request fields that turn thinking on (gate.orchestrator.request_fields
# finds the refused ones; `thinking_tokens` only sets the bundled server's reasoning length).
THINKING_PROFILES = ("reasoning_mix",)
THINKING_SWITCHES = ("chat_template_kwargs",)


def _judges_thinking(gate: Gate) -> bool:
    scoped = set(gate.scope.profile or ())
    if not scoped or not scoped <= set(THINKING_PROFILES):
        return False
    return "thinking" in (gate.scope.length_class or ()) or "with_thinking" in (
        gate.scope.stage or ()
    )


def _needs_batch_api(gate: Gate) -> bool:
    scoped = set(gate.scope.profile or ())
    return gate.metric.startswith("batch_job_") or bool(
        scoped and scoped <= set(BATCH_API_PROFILES)
    )


def unmeasurable_reason(gate: Gate, info: TargetInfo) -> str | None:
    """Why `info`'s target can never give `gate` a value; None when it can (or may)."""
    if info.no_batch_api is not None and _needs_batch_api(gate):
        return f"not measurable on this {info.server_kind} target ({info.no_batch_api})"
    switches = [name for name in THINKING_SWITCHES if name in info.refused_fields]
    if switches and _judges_thinking(gate):
        return (
            f"not measurable on this {info.server_kind} target (it refuses "
            f"{', '.join(switches)}: no request can turn thinking on, so the thinking requests "
            "would be plain chat)"
        )
    entry = glossary.get_metric(gate.metric)
    if entry.source is not glossary.Source.SERVER:
        return None
    needs = SERVER_METRIC_NEEDS.get(gate.metric)
    if needs is None:
        return None
    names, steps_suffice = needs
    if steps_suffice and info.has_step_records:
        return None
    missing = [f"{name}: {info.unavailable[name]}" for name in names if name in info.unavailable]
    if not missing:
        return None
    fallback = SERVER_METRIC_FALLBACKS.get(gate.metric)
    if fallback is not None and fallback not in info.unavailable:
        return None
    return f"not measurable on this {info.server_kind} target ({'; '.join(missing)})"
