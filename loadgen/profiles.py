"""Built-in traffic profiles and their resolution from overrides.

Owns the profile catalogue (night_trickle, burst, mixed_lengths, priority_mix, steady, ramp,
offline_job),
each as flat default parameters plus a pure builder, and `resolve(name, overrides, scale)` which
validates overrides (unknown keys are errors naming the key) and returns a `ProfileSpec`. It does
not generate arrivals or requests (see `loadgen.plan`) nor know about Locust.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.arrivals import ArrivalProcess, iter_arrivals
from loadgen.errors import ConfigError
from loadgen.job_params import job_defaults, job_stages, scale_job_lines, validate_job_params
from loadgen.lengths import LengthDist
from loadgen.overrides import apply_override
from loadgen.replay import Replay, build_replay
from loadgen.shapes import RateSchedule, RateStage

__all__ = [
    "CONTINUOUS_USAGE",
    "PROFILES",
    "SCALES",
    "ProfileSpec",
    "TrafficClass",
    "params_hash",
    "resolve",
]

# Durations are multiplied by these when no explicit duration is given.
SCALES = {"smoke": 0.05, "quick": 0.25, "full": 1.0}
CONTINUOUS_USAGE = ("auto", "on", "off")

COMMON_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "arrival": "poisson",
    "gamma_shape": 1.0,
    "duration_seconds": None,  # overrides the profile's own total, stages keep their proportions
    "rate_rps": None,  # overrides the mean offered rate, stages keep their proportions
    "warmup_seconds": 0.0,
    "endpoint": "chat",
    "stream": True,
    # Per-chunk token counts from the target (stream_options.continuous_usage_stats): "on",
    # "off", or "auto" (the loadgen command probes the target once; plain Locust sends "off").
    "continuous_usage": "auto",
    "max_concurrency": 256,
    "request_timeout_seconds": 60.0,
    "max_schedule_lag_p99_seconds": 0.05,
    "max_client_cpu_ratio": 0.9,
    "dataset": None,
    "extra_body": {},
    "mode": "open",
    "users": 4,
    "think_time_seconds": 0.0,
}


@dataclass(frozen=True, kw_only=True)
class TrafficClass:
    """One kind of request in a profile's mix, `weight` its share of the requests (dealt in
    shuffled decks that hold the shares: loadgen/plan.py)."""

    weight: float
    priority: str
    length_class: str
    prompt_tokens: LengthDist
    output_tokens: LengthDist


@dataclass(frozen=True, kw_only=True)
class ProfileSpec:
    name: str
    scale: str
    params: dict[str, Any]
    schedule: RateSchedule
    arrival: ArrivalProcess
    classes: tuple[TrafficClass, ...]
    # How requests are made: "schedule" (arrivals from `schedule`, or closed-loop users),
    # "sessions" (multi-turn conversations, loadgen.conversations) or "trace" (a replay).
    driver: str = "schedule"
    replay: Replay | None = None  # the trace profile's window, as it will be sent

    @property
    def mode(self) -> str:
        return str(self.params["mode"])

    @property
    def seed(self) -> int:
        return int(self.params["seed"])


def _short_chat() -> dict[str, Any]:
    return {"kind": "uniform", "low": 16, "high": 64, "min": 1, "max": 4096}


def _single(name: str, params: dict[str, Any]) -> list[RateStage]:
    return [
        RateStage(
            name=name, duration_seconds=params["main_seconds"], rate_rps=params["base_rate_rps"]
        )
    ]


def _classes_one(params: dict[str, Any]) -> list[TrafficClass]:
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
    return [stage], _classes_one(p)


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
    return stages, _classes_one(p)


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
    return _single("main", p), _classes_one(p)


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
    return _single("main", p), _classes_one(p)


def _build_offline_job(p: dict[str, Any]) -> tuple[list[RateStage], list[TrafficClass]]:
    """The chat part (stages before_job, during_job); `loadgen.batch_job` sends the job."""
    validate_job_params(p)
    return job_stages(p), _classes_one(p)


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
}

_DRIVERS = {"chat_sessions": "sessions", "trace": "trace"}
# The trace profile's window at full scale when duration_seconds is not set: 300 s of the
# trace: the whole packaged excerpt (smoke: 15 s, quick: 75 s).
TRACE_WINDOW_SECONDS = 300.0
_DURATION_KEYS = ("main_seconds", "baseline_seconds", "spike_seconds", "recovery_seconds")


def params_hash(params: dict[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validate_common(p: dict[str, Any]) -> None:
    if p["endpoint"] not in ("chat", "completions"):
        raise ConfigError(f"endpoint must be 'chat' or 'completions', got {p['endpoint']!r}")
    if p["continuous_usage"] not in CONTINUOUS_USAGE:
        raise ConfigError(
            f"continuous_usage must be one of {', '.join(CONTINUOUS_USAGE)}, "
            f"got {p['continuous_usage']!r}"
        )
    if p["mode"] not in ("open", "closed"):
        raise ConfigError(f"mode must be 'open' or 'closed', got {p['mode']!r}")
    for key in ("max_concurrency", "users"):
        if int(p[key]) < 1:
            raise ConfigError(f"{key} must be >= 1, got {p[key]}")
    for key in ("request_timeout_seconds", "max_schedule_lag_p99_seconds", "max_client_cpu_ratio"):
        if float(p[key]) <= 0:
            raise ConfigError(f"{key} must be > 0, got {p[key]}")
    if float(p["think_time_seconds"]) < 0 or float(p["warmup_seconds"]) < 0:
        raise ConfigError("think_time_seconds and warmup_seconds must be >= 0")
    if p["duration_seconds"] is not None and float(p["duration_seconds"]) <= 0:
        raise ConfigError(f"duration_seconds must be > 0, got {p['duration_seconds']}")
    if p["rate_rps"] is not None and float(p["rate_rps"]) <= 0:
        raise ConfigError(f"rate_rps must be > 0, got {p['rate_rps']}")


def resolve(name: str, overrides: dict[str, Any] | None = None, scale: str = "full") -> ProfileSpec:
    """The fully resolved profile `name` with `overrides` (keys may be dotted) at `scale`."""
    if name not in PROFILES:
        raise ConfigError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    defaults, builder, _ = PROFILES[name]
    params = copy.deepcopy({**COMMON_DEFAULTS, **defaults})
    if not isinstance(overrides or {}, dict):
        raise ConfigError(f"profile overrides must be a mapping, got {overrides!r}")
    for key, value in (overrides or {}).items():
        if key == "continuous_usage" and isinstance(value, bool):
            value = "on" if value else "off"  # YAML 1.1 (gates.yaml) reads a bare on/off so
        apply_override(params, str(key), copy.deepcopy(value))
    _validate_common(params)
    if _DRIVERS.get(name) == "trace":
        return _resolve_trace(name, scale, params)
    if params["duration_seconds"] is None:
        for key in _DURATION_KEYS:
            if key in params:
                params[key] = float(params[key]) * SCALES[scale]
        params["warmup_seconds"] = float(params["warmup_seconds"]) * SCALES[scale]
        scale_job_lines(params, SCALES[scale])
        if "sessions_total" in params:
            if int(params["sessions_total"]) < 1:
                raise ConfigError(f"sessions_total must be >= 1, got {params['sessions_total']}")
            params["sessions_total"] = max(
                1, math.ceil(int(params["sessions_total"]) * SCALES[scale])
            )
    stages, classes = builder(params)
    if "job_lines" in params:
        params["job_lines"] = int(params["job_lines"])
    schedule = RateSchedule(tuple(stages))
    if params["duration_seconds"] is not None:
        factor = float(params["duration_seconds"]) / schedule.duration_seconds
        schedule = schedule.scaled(factor)
        # warm-up keeps its share of the run, so a short explicit duration is not all warm-up
        params["warmup_seconds"] = float(params["warmup_seconds"]) * min(factor, 1.0)
    if params["rate_rps"] is not None:
        schedule = _rescale_rate(schedule, float(params["rate_rps"]))
    if params["mode"] == "open" and schedule.expected_count <= 0:
        raise ConfigError(f"profile {name!r} offers no requests (all rates are zero)")
    return ProfileSpec(
        driver=_DRIVERS.get(name, "schedule"),
        name=name,
        scale=scale,
        params=params,
        schedule=schedule,
        arrival=ArrivalProcess(kind=params["arrival"], gamma_shape=float(params["gamma_shape"])),
        classes=tuple(classes),
    )


def _resolve_trace(name: str, scale: str, params: dict[str, Any]) -> ProfileSpec:
    """The trace profile: its window and time scale decide the schedule, not rates."""
    if params["rate_rps"] is not None:
        raise ConfigError("the trace profile's rate is the trace's: set time_scale, not rate_rps")
    if params["tokenizer"] is not None and not isinstance(params["tokenizer"], str):
        raise ConfigError(
            f"tokenizer must be auto, bytes, words or a path, got {params['tokenizer']!r}"
        )
    for key in ("start_seconds", "length_scale"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {value!r}")
    replay = build_replay(params, default_window_seconds=TRACE_WINDOW_SECONDS * SCALES[scale])
    params["warmup_seconds"] = float(params["warmup_seconds"]) * SCALES[scale]
    stage = RateStage(
        name="main",
        duration_seconds=replay.duration_seconds,
        rate_rps=len(replay.requests) / replay.duration_seconds,
    )
    return ProfileSpec(
        driver="trace",
        replay=replay,
        name=name,
        scale=scale,
        params=params,
        schedule=RateSchedule((stage,)),
        arrival=ArrivalProcess(kind="constant", gamma_shape=1.0),
        classes=tuple(_classes_one(params)),
    )


def check_plans_requests(spec: ProfileSpec) -> None:
    """Raise ConfigError when an open-loop `spec` plans no request at all: such a load could
    only send nothing and end invalid. Not part of `resolve`, which also validates profiles
    whose rates are placeholders until a calibration (`batchgate run`)."""
    schedule = spec.schedule
    if spec.mode != "open" or next(iter_arrivals(spec.arrival, schedule, seed=spec.seed), None):
        return
    raise ConfigError(
        f"profile {spec.name!r} plans no request: {schedule.expected_count:.2g} expected over "
        f"its {schedule.duration_seconds:g} s at {schedule.mean_rate_rps:.3g} req/s, and seed "
        f"{spec.seed} draws none; lengthen duration_seconds or raise rate_rps"
    )


def _rescale_rate(schedule: RateSchedule, mean_rate_rps: float) -> RateSchedule:
    factor = mean_rate_rps / schedule.mean_rate_rps if schedule.mean_rate_rps > 0 else 0.0
    if factor <= 0:
        raise ConfigError("cannot set rate_rps on a schedule whose rates are all zero")
    return RateSchedule(
        tuple(
            RateStage(
                name=s.name,
                duration_seconds=s.duration_seconds,
                rate_rps=s.rate_rps * factor,
                end_rate_rps=None if s.end_rate_rps is None else s.end_rate_rps * factor,
            )
            for s in schedule.stages
        )
    )
