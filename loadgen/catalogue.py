"""The built-in profile catalogue: each profile's default parameters and its pure builder.

Owns `PROFILES` (steady, ramp, night_trickle, burst, mixed_lengths, priority_mix, chat_sessions,
trace, offline_job, reasoning_mix, sampling_mix, consistency_probes: name -> defaults, builder,
description), where a builder turns resolved
parameters into the schedule's stages and the traffic classes. It does not apply overrides or
scales (`loadgen.profiles`), plan requests (`loadgen.plan`) or read traces (`loadgen.replay`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.errors import ConfigError
from loadgen.job_params import job_defaults, job_stages, validate_job_params
from loadgen.lengths import LengthDist
from loadgen.profile_spec import TrafficClass
from loadgen.shapes import RateStage

__all__ = ["PROFILES", "classes_one"]


def _short_chat() -> dict[str, Any]:
    return {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096}


def _single(name: str, params: dict[str, Any]) -> list[RateStage]:
    return [
        RateStage(
            name=name, duration_seconds=params["main_seconds"], rate_rps=params["base_rate_rps"]
        )
    ]


def classes_one(params: dict[str, Any]) -> list[TrafficClass]:
    return [
        TrafficClass(
            weight=1.0,
            priority=params["priority"],
            length_class="short",
            prompt_tokens=LengthDist.from_value(params["prompt_tokens"]),
            output_tokens=LengthDist.from_value(params["output_tokens"]),
        )
    ]


def _build_ramp(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    stage = RateStage(
        name="main",
        duration_seconds=p["main_seconds"],
        rate_rps=p["start_rate_rps"],
        end_rate_rps=p["end_rate_rps"],
    )
    return [stage], classes_one(p)


def _build_burst(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    stages = [
        RateStage(
            name="baseline", duration_seconds=p["baseline_seconds"], rate_rps=p["base_rate_rps"]
        ),
        RateStage(name="spike", duration_seconds=p["spike_seconds"], rate_rps=p["spike_rate_rps"]),
        RateStage(
            name="recovery", duration_seconds=p["recovery_seconds"], rate_rps=p["base_rate_rps"]
        ),
    ]
    return stages, classes_one(p)


def _build_mixed(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    share = p["long_share"]
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"long_share must be within [0, 1], got {share}")
    classes = [
        TrafficClass(
            weight=1.0 - share,
            priority=p["priority"],
            length_class="short",
            prompt_tokens=LengthDist.from_value(p["prompt_tokens"]),
            output_tokens=LengthDist.from_value(p["output_tokens"]),
        ),
        TrafficClass(
            weight=share,
            priority=p["priority"],
            length_class="long",
            prompt_tokens=LengthDist.from_value(p["long_prompt_tokens"]),
            output_tokens=LengthDist.from_value(p["long_output_tokens"]),
        ),
    ]
    return _single("main", p), classes


def _build_priority(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    share = p["batch_share"]
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"batch_share must be within [0, 1], got {share}")
    classes = [
        TrafficClass(
            weight=1.0 - share,
            priority="interactive",
            length_class="short",
            prompt_tokens=LengthDist.from_value(p["prompt_tokens"]),
            output_tokens=LengthDist.from_value(p["output_tokens"]),
        ),
        TrafficClass(
            weight=share,
            priority="batch",
            length_class="long",
            prompt_tokens=LengthDist.from_value(p["batch_prompt_tokens"]),
            output_tokens=LengthDist.from_value(p["batch_output_tokens"]),
        ),
    ]
    return _single("main", p), classes


def _build_single(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    return _single("main", p), classes_one(p)


def _build_sessions(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    """Conversations, not a rate: the one stage bounds how long new turns start."""
    if p["mode"] != "closed":
        raise ConfigError("chat_sessions is a closed loop (each turn waits for the answer)")
    for key in ("sessions_total", "concurrent_sessions"):
        if int(p[key]) < 1:
            raise ConfigError(f"{key} must be >= 1, got {p[key]}")
    if int(p["system_prompt_tokens"]) < 0:
        raise ConfigError(f"system_prompt_tokens must be >= 0, got {p['system_prompt_tokens']}")
    for key in ("turns", "user_tokens"):
        LengthDist.from_value(p[key])  # validated here, with the key in the message
    return _single("main", p), classes_one(p)


def _build_offline_job(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    """The chat part (stages before_job, during_job); `loadgen.batch_job` sends the job."""
    validate_job_params(p)
    return job_stages(p), classes_one(p)


def _split(p: dict[str, Any], ratio_key: str, names: tuple[str, str]) -> list[RateStage]:
    """main_seconds split at `ratio_key` into two stages of the same rate (as the offline job's
    before_job / during_job), so a ratio gate compares the two in one run at one load."""
    ratio = float(p[ratio_key])
    if not 0.0 < ratio < 1.0:
        raise ConfigError(f"{ratio_key} must be within (0, 1), got {p[ratio_key]}")
    total = float(p["main_seconds"])
    return [
        RateStage(name=names[0], duration_seconds=total * ratio, rate_rps=p["base_rate_rps"]),
        RateStage(name=names[1], duration_seconds=total * (1 - ratio), rate_rps=p["base_rate_rps"]),
    ]


def _build_reasoning(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    """Chat alone (before_thinking), then chat with a share of thinking requests
    (with_thinking): `thinking` requests ask for exactly `thinking_tokens` of reasoning (the
    bundled server's `thinking_tokens`; others think as long as they think) within max_tokens,
    which bounds reasoning and answer together."""
    share = float(p["thinking_share"])
    if not 0.0 < share < 1.0:
        raise ConfigError(f"thinking_share must be within (0, 1), got {p['thinking_share']}")
    thinking = p["thinking_tokens"]
    if isinstance(thinking, bool) or not isinstance(thinking, int) or thinking < 1:
        raise ConfigError(f"thinking_tokens must be a whole number >= 1, got {thinking!r}")
    stages = _split(p, "thinking_start_ratio", ("before_thinking", "with_thinking"))
    chat = classes_one(p)[0]
    classes = [
        chat,
        TrafficClass(
            weight=share / (1.0 - share),  # of with_thinking's requests: `share` think
            priority=p["priority"],
            length_class="thinking",
            prompt_tokens=LengthDist.from_value(p["prompt_tokens"]),
            output_tokens=LengthDist.from_value(p["thinking_output_tokens"]),
            stages=("with_thinking",),
            extra_body={
                "chat_template_kwargs": {"enable_thinking": True},
                "thinking_tokens": thinking,
            },
        ),
    ]
    return stages, classes


def _build_sampling(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    """One parameter set for every request (uniform), then each request its own (mixed)."""
    stages = _split(p, "mixed_start_ratio", ("uniform", "mixed"))
    base = classes_one(p)[0]
    uniform = dict(p["uniform_sampling"])
    if not uniform:
        raise ConfigError("uniform_sampling must name the shared sampling parameters")
    return stages, [
        TrafficClass(
            weight=1.0,
            priority=base.priority,
            length_class="short",
            prompt_tokens=base.prompt_tokens,
            output_tokens=base.output_tokens,
            stages=("uniform",),
            extra_body=uniform,
        ),
        TrafficClass(
            weight=1.0,
            priority=base.priority,
            length_class="short",
            prompt_tokens=base.prompt_tokens,
            output_tokens=base.output_tokens,
            stages=("mixed",),
            sampling="mixed",
        ),
    ]


def _build_probes(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    if p["mode"] != "closed":
        raise ConfigError("consistency_probes is a closed loop (one probe at a time)")
    rounds = p["probe_rounds"]
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"probe_rounds must be a whole number >= 1, got {rounds!r}")
    return [RateStage(name="alone", duration_seconds=p["main_seconds"], rate_rps=1.0)], classes_one(
        p
    )


_Builder = Callable[[dict[str, Any]], tuple[list[RateStage], list[TrafficClass]]]

# name -> (profile defaults, builder, description)
PROFILES: dict[str, tuple[dict[str, Any], _Builder, str]] = {
    "steady": (
        {
            "base_rate_rps": 4.0,
            "main_seconds": 120.0,
            "priority": "interactive",
            "prompt_tokens": {"kind": "uniform", "low": 64, "high": 256, "min": 1, "max": 4096},
            "output_tokens": {"kind": "uniform", "low": 32, "high": 128, "min": 1, "max": 4096},
            "warmup_seconds": 5.0,
        },
        _build_single,
        "constant mean rate, Poisson arrivals",
    ),
    "ramp": (
        {
            "start_rate_rps": 1.0,
            "end_rate_rps": 16.0,
            "main_seconds": 120.0,
            "priority": "interactive",
            "prompt_tokens": {"kind": "uniform", "low": 64, "high": 256, "min": 1, "max": 4096},
            "output_tokens": {"kind": "uniform", "low": 32, "high": 128, "min": 1, "max": 4096},
        },
        _build_ramp,
        "rate ramps linearly from start_rate_rps to end_rate_rps",
    ),
    "night_trickle": (
        {
            "base_rate_rps": 0.15,
            "main_seconds": 300.0,
            "priority": "interactive",
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 8, "high": 32, "min": 1, "max": 4096},
        },
        _build_single,
        "sparse Poisson arrivals (gaps longer than keep-alive timeouts), short chats",
    ),
    "burst": (
        {
            "base_rate_rps": 2.0,
            "spike_rate_rps": 20.0,
            "baseline_seconds": 20.0,
            "spike_seconds": 10.0,
            "recovery_seconds": 30.0,
            "priority": "interactive",
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
        },
        _build_burst,
        "baseline -> spike -> recovery stages, tagged on records",
    ),
    "mixed_lengths": (
        {
            "base_rate_rps": 4.0,
            "main_seconds": 120.0,
            "long_share": 0.1,
            "priority": "interactive",
            "prompt_tokens": {
                "kind": "lognormal",
                "median": 64,
                "sigma": 0.5,
                "min": 8,
                "max": 512,
            },
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
            "long_prompt_tokens": {
                "kind": "lognormal",
                "median": 1024,
                "sigma": 0.3,
                "min": 256,
                "max": 4096,
            },
            "long_output_tokens": {
                "kind": "uniform",
                "low": 256,
                "high": 512,
                "min": 1,
                "max": 4096,
            },
        },
        _build_mixed,
        "mostly short requests plus a share of long ones (length_class short|long)",
    ),
    "priority_mix": (
        {
            "base_rate_rps": 4.0,
            "main_seconds": 120.0,
            "batch_share": 0.5,
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
            "batch_prompt_tokens": {
                "kind": "uniform",
                "low": 256,
                "high": 1024,
                "min": 1,
                "max": 8192,
            },
            "batch_output_tokens": {
                "kind": "uniform",
                "low": 128,
                "high": 512,
                "min": 1,
                "max": 8192,
            },
        },
        _build_priority,
        "interactive chats plus heavy batch-class background traffic (priority tags)",
    ),
    "chat_sessions": (
        {
            "mode": "closed",
            "base_rate_rps": 1.0,  # unused: sessions pace themselves
            "main_seconds": 600.0,  # at most; the run ends when sessions_total are done
            "sessions_total": 400,
            "concurrent_sessions": 4,
            "turns": {"kind": "uniform", "low": 2, "high": 6, "min": 1, "max": 64},
            "system_prompt_tokens": 512,
            "user_tokens": {"kind": "uniform", "low": 32, "high": 64, "min": 1, "max": 4096},
            "output_tokens": {"kind": "uniform", "low": 16, "high": 32, "min": 1, "max": 4096},
            "prompt_tokens": _short_chat(),  # unused: turns are built from the fields above
            "think_time_seconds": 0.2,
            "priority": "interactive",
        },
        _build_sessions,
        "N concurrent multi-turn conversations; each turn resends the whole history "
        "(stages first_turn, follow_up)",
    ),
    "trace": (
        {
            "path": None,  # the packaged Mooncake excerpt (docs/traces.md)
            "format": "auto",
            "start_seconds": 0.0,
            # duration_seconds (common key) is the trace window; unset: TRACE_WINDOW_SECONDS
            # of the trace at full scale, times the scale
            "time_scale": 1.0,
            "length_scale": 1.0,
            "max_input_tokens": None,
            "max_output_tokens": None,
            "context_tokens": None,  # the target's context; `batchgate load` asks the target
            "tokenizer": "auto",
            "token_units": None,  # with tokenizer "target": the units its /tokenize verified
            "exact_output": True,
            "priority": "interactive",
            "prompt_tokens": _short_chat(),  # unused: lengths come from the trace
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
        },
        _build_single,
        "replays a window of a production trace (Mooncake, Azure, BurstGPT, Bailian, jsonl) "
        "open loop, prompts sharing the trace's prefix blocks",
    ),
    "offline_job": (
        {
            "base_rate_rps": 2.0,
            "main_seconds": 120.0,
            "priority": "interactive",
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
            # The offline job sent through the target's Batch API part-way through the chat.
            **job_defaults(_short_chat()),
        },
        _build_offline_job,
        "steady short chats (before_job, during_job stages) plus a Batch API job of job_lines",
    ),
    "reasoning_mix": (
        {
            "base_rate_rps": 2.0,
            "main_seconds": 120.0,
            "thinking_start_ratio": 0.4,
            "thinking_share": 0.3,
            "thinking_tokens": 64,
            "priority": "interactive",
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
            # reasoning + answer: max_tokens bounds both
            "thinking_output_tokens": {
                "kind": "uniform",
                "low": 80,
                "high": 128,
                "min": 1,
                "max": 4096,
            },
        },
        _build_reasoning,
        "chat (before_thinking), then chat with a share of thinking requests (with_thinking; "
        "length_class thinking)",
    ),
    "sampling_mix": (
        {
            "mode": "closed",
            "users": 64,
            "base_rate_rps": 1.0,  # unused: a closed loop
            "main_seconds": 120.0,
            "mixed_start_ratio": 0.5,
            "uniform_sampling": {"temperature": 0.7, "top_p": 0.9},
            "priority": "interactive",
            "prompt_tokens": _short_chat(),
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
        },
        _build_sampling,
        "saturating closed loop: one sampling parameter set for all (uniform), then each "
        "request its own temperature/top_p/top_k/seed/penalties/logit_bias/stop (mixed)",
    ),
    "consistency_probes": (
        {
            "mode": "closed",
            "base_rate_rps": 1.0,  # unused: one probe at a time
            "main_seconds": 600.0,  # at most; ends when every probe was answered
            "probe_rounds": 1,
            "think_time_seconds": 0.1,  # the pause after each answer: the next finds it idle
            "priority": "interactive",
            "prompt_tokens": _short_chat(),  # unused: the probe set's prompts
            "output_tokens": {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096},
        },
        _build_probes,
        "the answer-consistency probe set (loadgen.probes), each probe alone: the answers "
        "the probes sent during other profiles are compared with",
    ),
}
