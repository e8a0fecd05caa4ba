"""Traffic profiles resolved from the catalogue, overrides and a scale.

Owns the parameters every profile shares (`COMMON_DEFAULTS`), the scales, and
`resolve(name, overrides, scale)`, which validates overrides (unknown keys are errors naming the
key), applies the scale, builds the schedule (or, for `trace`, the replay) and returns a
`ProfileSpec`. The profiles themselves are `loadgen.catalogue`'s; `PROFILES`, `ProfileSpec` and
`TrafficClass` are re-exported here. It does not generate arrivals or requests (see
`loadgen.plan`) nor know about Locust.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from loadgen.arrivals import ArrivalProcess, iter_arrivals
from loadgen.catalogue import PROFILES, classes_one
from loadgen.errors import ConfigError
from loadgen.job_params import scale_job_lines
from loadgen.overrides import apply_override
from loadgen.profile_spec import ProfileSpec, TrafficClass
from loadgen.replay import build_replay
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
    # Request-body fields left out of every request: those the target refuses (a strict
    # OpenAI server answers 422 to min_tokens, ignore_eos, top_k, thinking_tokens, ...);
    # `batchgate run` finds them at the start and passes them here (--drop-fields).
    "drop_fields": [],
    # Answer-consistency probes sent during the profile (loadgen.probes; 0: none). Their
    # records are marked `probe` and count in the load; the gate compares their answers with
    # the same probes answered alone (the consistency_probes profile).
    "probes": 0,
}


_DRIVERS = {"chat_sessions": "sessions", "trace": "trace", "consistency_probes": "probes"}
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
    _validate_drop_fields(p["drop_fields"])
    probes = p["probes"]
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 0:
        raise ConfigError(f"probes must be a whole number >= 0, got {probes!r}")


# The fields a request cannot go without: never dropped.
ESSENTIAL_FIELDS = ("model", "messages", "prompt", "max_tokens", "stream")


def _validate_drop_fields(fields: Any) -> None:
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigError(f"drop_fields must be a list of field names, got {fields!r}")
    essential = sorted(set(fields) & set(ESSENTIAL_FIELDS))
    if essential:
        raise ConfigError(f"drop_fields cannot drop {', '.join(essential)}: every request needs it")


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
        classes=tuple(classes_one(params)),
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
