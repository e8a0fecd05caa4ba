"""What a batching preset means on servers that cannot take it live (docs/rollback.md).

Owns the documented mapping of preset keys to vLLM engine flags, Triton dynamic-batcher fields
and TGI router flags, each exact or the nearest knob with a note saying how it differs, and its
text form for `batchgate rollback` against such a server. It does not talk to any server
(`gate.rollback`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Equivalent", "equivalent_settings", "format_equivalents"]

CLASSES = ("interactive", "batch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Equivalent:
    server: str  # vllm | triton | tgi | llamacpp
    key: str  # the preset key it comes from
    setting: str | None  # the flag / config line to use; None when there is no equivalent
    exact: bool  # False: nearest knob, the note says how it differs
    note: str | None = None


def equivalent_settings(preset: Mapping[str, Any]) -> dict[str, list[Equivalent]]:
    """The preset's keys as vLLM, Triton, TGI and llama.cpp settings (docs/rollback.md)."""
    flat = _flatten(preset)
    out: dict[str, list[Equivalent]] = {server: [] for server in _MAPPERS}
    for key, value in flat.items():
        for server, mapper in _MAPPERS.items():
            if key in _SAMPLING_NOTES:
                out[server].append(_none(server, key, _SAMPLING_NOTES[key]))
            elif key == "policy" and value == "slo":
                out[server].append(_slo_policy(mapper(key, "continuous")))
            else:
                out[server].append(mapper(key, value))
    return out


def _slo_policy(continuous: Equivalent) -> Equivalent:
    # No other server sizes each step's token budget to a step-time target; continuous batching
    # with a token budget chosen for that target (measure it: `batchgate sweep`) comes nearest.
    return dataclasses.replace(
        continuous,
        key="policy",
        exact=False,
        note="no per-step SLO budget: continuous batching with max_num_batched_tokens set "
        "small enough for the step-time target is the nearest",
    )


def _flatten(preset: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in preset.items():
        if key in CLASSES and isinstance(value, Mapping):
            for sub, v in value.items():
                flat[f"{key}.{sub}"] = v
        else:
            flat[key] = value
    return flat


def _none(server: str, key: str, why: str) -> Equivalent:
    return Equivalent(server=server, key=key, setting=None, exact=False, note=why)


def _vllm(key: str, value: Any) -> Equivalent:
    s = "vllm"
    field = key.rsplit(".", 1)[-1]
    if key == "policy":
        if value == "continuous":
            return Equivalent(
                server=s,
                key=key,
                setting="(default)",
                exact=True,
                note="vLLM always batches per iteration",
            )
        return _none(
            s, key, f"vLLM has no request-level '{value}' batching; it is always continuous"
        )
    if key == "max_num_seqs":
        return Equivalent(server=s, key=key, setting=f"--max-num-seqs {value}", exact=True)
    if key == "max_num_batched_tokens":
        return Equivalent(
            server=s, key=key, setting=f"--max-num-batched-tokens {value}", exact=True
        )
    if key == "max_prefill_chunk_tokens":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--long-prefill-token-threshold {value}",
            exact=False,
            note="with --enable-chunked-prefill; caps long prompts' chunks",
        )
    if key == "enable_prefix_caching":
        flag = "--enable-prefix-caching" if value else "--no-enable-prefix-caching"
        return Equivalent(
            server=s, key=key, setting=flag, exact=True, note="on by default in vLLM v1"
        )
    if key == "shared_queue":
        policy = "fcfs" if value else "priority"
        return Equivalent(
            server=s,
            key=key,
            setting=f"--scheduling-policy {policy}",
            exact=False,
            note="priority: requests carry vLLM's numeric `priority` (lower first)",
        )
    if field in ("max_batch_size", "max_wait_ms", "dispatch_threshold"):
        return _none(s, key, "vLLM has no per-class batch window or batch size")
    if field == "max_waiting":
        return _none(s, key, "vLLM's waiting queue is unbounded; limit at the proxy")
    if key == "kv_cache_memory_bytes":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--kv-cache-memory-bytes {value}",
            exact=False,
            note="recent vLLM only; older ones size the cache by --gpu-memory-utilization",
        )
    if key == "num_gpu_blocks_override":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--num-gpu-blocks-override {value}",
            exact=True,
            note="the same setting: the KV pool in blocks (of --block-size tokens)",
        )
    return _none(s, key, "no vLLM equivalent")


def _triton(key: str, value: Any) -> Equivalent:
    s = "triton"
    field = key.rsplit(".", 1)[-1]
    per_class = "." in key
    if key == "policy":
        settings = {
            "dynamic": ("dynamic_batching { }", True, None),
            "static": (
                "(remove the dynamic_batching block)",
                False,
                "without it Triton runs requests as they arrive; batch on the client",
            ),
            "continuous": (
                'parameters { key: "batching_strategy" value: { string_value: '
                '"inflight_fused_batching" } }',
                False,
                "in-flight batching exists only in the TensorRT-LLM backend",
            ),
        }
        setting, exact, note = settings.get(value, (None, False, f"unknown policy {value!r}"))
        return Equivalent(server=s, key=key, setting=setting, exact=exact, note=note)
    if field == "max_batch_size":
        return Equivalent(
            server=s,
            key=key,
            setting=f"max_batch_size: {value}",
            exact=not per_class,
            note="one per model in Triton, not per priority class" if per_class else None,
        )
    if field == "max_wait_ms":
        micros = round(float(value) * 1000)
        return Equivalent(
            server=s,
            key=key,
            setting=f"dynamic_batching {{ max_queue_delay_microseconds: {micros} }}",
            exact=not per_class,
            note="one delay per model in Triton" if per_class else None,
        )
    if field == "dispatch_threshold":
        if value is None:  # adaptive dispatch off: Triton's default is no preferred size
            return Equivalent(
                server=s,
                key=key,
                setting="dynamic_batching { } (no preferred_batch_size)",
                exact=True,
                note=None,
            )
        return Equivalent(
            server=s,
            key=key,
            setting=f"dynamic_batching {{ preferred_batch_size: [ {value} ] }}",
            exact=False,
            note="Triton dispatches at once when a preferred size forms",
        )
    if field == "max_waiting":
        level = CLASSES.index(key.split(".")[0]) + 1 if per_class else None
        if level is None:
            return Equivalent(
                server=s,
                key=key,
                exact=True,
                setting=f"default_queue_policy {{ max_queue_size: {value} }}",
            )
        return Equivalent(
            server=s,
            key=key,
            exact=True,
            setting=f"priority_levels: 2, priority_queue_policy {{ key: {level} "
            f"value: {{ max_queue_size: {value} }} }}",
        )
    if key == "max_num_seqs":
        return Equivalent(
            server=s,
            key=key,
            setting=f"trtllm-build --max_batch_size {value}",
            exact=False,
            note="TensorRT-LLM backend engine build option",
        )
    if key == "max_num_batched_tokens":
        return Equivalent(
            server=s,
            key=key,
            setting=f"trtllm-build --max_num_tokens {value}",
            exact=False,
            note="TensorRT-LLM backend engine build option",
        )
    if key == "kv_cache_memory_bytes":
        return Equivalent(
            server=s,
            key=key,
            setting="kv_cache_free_gpu_mem_fraction / max_tokens_in_paged_kv_cache",
            exact=False,
            note="TensorRT-LLM backend parameters; sized as a fraction or in tokens, not bytes",
        )
    if key == "num_gpu_blocks_override":
        return Equivalent(
            server=s,
            key=key,
            setting="max_tokens_in_paged_kv_cache = blocks x tokens per block",
            exact=False,
            note="TensorRT-LLM backend parameter; a token budget, not blocks",
        )
    return _none(s, key, "no Triton equivalent")


def _tgi(key: str, value: Any) -> Equivalent:
    s = "tgi"
    if key == "enable_prefix_caching":
        return Equivalent(
            server=s,
            key=key,
            setting=f"PREFIX_CACHING={int(bool(value))}",
            exact=False,
            note="an environment variable of the TGI launcher",
        )
    field = key.rsplit(".", 1)[-1]
    if key == "policy":
        if value == "continuous":
            return Equivalent(
                server=s,
                key=key,
                setting="(default)",
                exact=True,
                note="TGI's router always batches continuously",
            )
        return _none(s, key, f"TGI has no '{value}' batching policy")
    if key == "max_num_seqs":
        return Equivalent(server=s, key=key, setting=f"--max-batch-size {value}", exact=True)
    if key == "max_num_batched_tokens":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--max-batch-prefill-tokens {value}",
            exact=False,
            note="TGI caps prefill tokens per forward; decode tokens are "
            "bounded by --max-batch-total-tokens",
        )
    if field == "max_wait_ms":
        return _none(s, key, "TGI has no time window; --max-waiting-tokens counts decode steps")
    if field == "max_waiting":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--max-concurrent-requests {value}",
            exact=False,
            note="TGI's limit counts running and waiting requests of every class together",
        )
    if key == "kv_cache_memory_bytes":
        return Equivalent(
            server=s,
            key=key,
            setting="--cuda-memory-fraction / --max-batch-total-tokens",
            exact=False,
            note="TGI sizes the KV cache from a memory fraction or a token budget, not bytes",
        )
    if key == "num_gpu_blocks_override":
        return Equivalent(
            server=s,
            key=key,
            setting="--max-batch-total-tokens (blocks x tokens per block)",
            exact=False,
            note="TGI bounds the KV cache by a token budget, not blocks",
        )
    return _none(s, key, "no TGI equivalent")


def _llamacpp(key: str, value: Any) -> Equivalent:
    s = "llamacpp"
    field = key.rsplit(".", 1)[-1]
    if key == "enable_prefix_caching":
        setting = "(default: cache_prompt true)" if value else '"cache_prompt": false per request'
        return Equivalent(
            server=s,
            key=key,
            setting=setting,
            exact=False,
            note="llama-server reuses a slot's cached prompt prefix per request",
        )
    if key == "policy":
        if value == "continuous":
            return Equivalent(
                server=s,
                key=key,
                setting="--cont-batching (default)",
                exact=True,
                note="llama-server batches its slots continuously unless told not to",
            )
        return Equivalent(
            server=s,
            key=key,
            setting="--no-cont-batching",
            exact=False,
            note=f"no '{value}' policy: new requests then wait for the slots' batch to finish",
        )
    if key == "max_num_seqs":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--parallel {value}",
            exact=False,
            note="slots: each also splits --ctx-size, so more slots means less context each",
        )
    if key == "max_num_batched_tokens":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--batch-size {value}",
            exact=False,
            note="tokens per llama_decode call (logical batch)",
        )
    if key == "max_prefill_chunk_tokens":
        return Equivalent(
            server=s,
            key=key,
            setting=f"--ubatch-size {value}" if value else "(default)",
            exact=False,
            note="the physical batch a long prompt is processed in",
        )
    if key in ("num_gpu_blocks_override", "kv_cache_memory_bytes"):
        return Equivalent(
            server=s,
            key=key,
            setting="--ctx-size (KV tokens of all slots together)",
            exact=False,
            note="llama.cpp sizes its KV cache in tokens, not blocks or bytes",
        )
    if key == "shared_queue" or field in ("max_waiting", "max_batch_size", "max_wait_ms"):
        return _none(s, key, "llama-server has no priority classes, batch window or queue limit")
    return _none(s, key, "no llama.cpp equivalent")


# Batch alignment keys (issue 39) are the bundled server's failure switches: the rollback value
# (mixed alignment, a generator per seeded request) is what the other servers always do.
_SAMPLING_NOTES = {
    "sampling_alignment": (
        "no setting: the server batches requests whatever their sampling parameters (the "
        "rollback value, `mixed`)"
    ),
    "shared_sampler_seed": (
        "no setting: a seeded request gets its own generator (the rollback value, `false`); "
        "answers that still change with the batch are the kernels' (vLLM: "
        "VLLM_BATCH_INVARIANT=1 where the version has it)"
    ),
}

_MAPPERS = {"vllm": _vllm, "triton": _triton, "tgi": _tgi, "llamacpp": _llamacpp}


def format_equivalents(preset_name: str, preset: Mapping[str, Any]) -> str:
    """Plain text for people: one block per server, one line per preset key."""
    lines = [f"Equivalent settings for preset '{preset_name}' (nothing was changed):"]
    titles = {
        "vllm": "vLLM (engine flags)",
        "triton": "Triton (model config.pbtxt)",
        "tgi": "TGI (router / launcher flags)",
        "llamacpp": "llama.cpp (llama-server flags)",
    }
    for server, items in equivalent_settings(preset).items():
        lines.append(f"  {titles[server]}:")
        for eq in items:
            value = eq.setting or "no equivalent"
            mark = "" if eq.exact or eq.setting is None else " (nearest)"
            note = f"  # {eq.note}" if eq.note else ""
            lines.append(f"    {eq.key:<34} -> {value}{mark}{note}")
    return "\n".join(lines)
