"""Profile parameters stated relative to the target's calibration, and their absolute values.

Owns the forms a profile override may take besides a number (docs/calibration.md):
- a rate (`rate_rps`, `base_rate_rps`, `spike_rate_rps`, ...): `"0.3x capacity"` — a multiple
  of the saturation capacity for the profile's own mix (calibrated output tokens/s divided by
  the mix's mean output tokens per request) — or `"0.25x lone"` — a multiple of one lone
  request's rate (1 / the unloaded E2E median): at 0.25x, a request finds the server busy
  about a quarter of the time;
- a duration (`main_seconds`, `baseline_seconds`, `spike_seconds`, `recovery_seconds`,
  `duration_seconds`): `"400 requests"` — as long as the stage's rate takes to send that many
  (scaled by `--scale` like seconds), `"20x unloaded"` — a multiple of the unloaded E2E, or
  `"1.5x kv"` — as many requests as hold 1.5 times the target's KV capacity in tokens (prompt +
  answer), where the target states its capacity (unknown: the run stops, no guess).
A slower target then gets the same load relative to what it can do and the same number of
samples per gate. A value resolved from a phase whose client was not a valid measurement (a
saturated client timed itself: `client.<phase>.measurement_valid` in calibration.json,
`gate.calibration.references`) stops the run with exit 5, as a missing one does. Before
calibration, `placeholders` stands a number in for each relative value so the load generator
can validate the rest. It does not measure anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gate.calibration.content import Calibration
from gate.calibration.references import (
    kv_capacity_tokens,
    phase_problem,
    saturated_rate,
    unloaded_median,
)
from gate.errors import BatchgateError, ExitCode

__all__ = [
    "RelativeError",
    "absolute_overrides",
    "mix_output_tokens",
    "mix_request_tokens",
    "placeholders",
    "relative_values",
]

_RATE_KEYS = ("rate_rps", "base_rate_rps", "spike_rate_rps", "start_rate_rps", "end_rate_rps")
# Which rate a duration's "N requests" divides by.
_DURATION_RATE = {
    "main_seconds": "base_rate_rps",
    "baseline_seconds": "base_rate_rps",
    "recovery_seconds": "base_rate_rps",
    "spike_seconds": "spike_rate_rps",
    "duration_seconds": "rate_rps",
}
# A trace replay's time scale: "0.5x capacity" replays the window so that its mean output-token
# rate is half the calibrated capacity; the load generator, which reads the trace, turns the
# rate into the factor (docs/traces.md).
_TIME_SCALE_KEYS = ("time_scale",)
_FACTOR_RE = re.compile(r"^\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*x\s+([a-z]+)\s*$")
_COUNT_RE = re.compile(r"^\s*(\d+)\s+requests?\s*$")


class RelativeError(BatchgateError, ValueError):
    """A relative profile value that cannot be read or resolved (usage error, exit 2)."""

    default_exit_code = ExitCode.USAGE


def relative_values(profile: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The overrides written in relative form, validated; raises RelativeError naming the key."""
    found: dict[str, str] = {}
    for key, value in overrides.items():
        if not isinstance(value, str):
            continue
        if key in _TIME_SCALE_KEYS:
            match = _FACTOR_RE.match(value)
            if not match or match.group(2) != "capacity":
                raise RelativeError(
                    f"profiles.{profile}.{key}: {value!r} is not a time scale; write a speed-up "
                    'factor (2 = twice as fast) or "0.5x capacity"'
                )
        elif key in _RATE_KEYS:
            match = _FACTOR_RE.match(value)
            if not match or match.group(2) not in ("capacity", "lone"):
                raise RelativeError(
                    f"profiles.{profile}.{key}: {value!r} is not a rate; write a number of "
                    'requests/s, "0.3x capacity" or "0.25x lone"'
                )
        elif key in _DURATION_RATE:
            match = _FACTOR_RE.match(value)
            if not (_COUNT_RE.match(value) or (match and match.group(2) in ("unloaded", "kv"))):
                raise RelativeError(
                    f"profiles.{profile}.{key}: {value!r} is not a duration; write seconds, "
                    '"400 requests", "20x unloaded" or "1.5x kv"'
                )
        else:
            continue
        if match is not None and not float(match.group(1)) > 0:
            raise RelativeError(f"profiles.{profile}.{key}: {value!r} must be positive")
        found[key] = value
    return found


def placeholders(overrides: Mapping[str, Any], relative: Mapping[str, str]) -> dict[str, Any]:
    """The overrides with 1.0 in place of each relative value (for validation only)."""
    return {k: (1.0 if k in relative else v) for k, v in overrides.items()}


def _mean_tokens(dist: Any) -> float:
    if isinstance(dist, (int, float)):
        return float(dist)
    if not isinstance(dist, Mapping):
        raise RelativeError(f"cannot take the mean of length distribution {dist!r}")
    kind = dist.get("kind")
    low, high = dist.get("min", 1), dist.get("max", math.inf)
    if kind == "fixed":
        mean = float(dist["value"])
    elif kind == "uniform":
        mean = (float(dist["low"]) + float(dist["high"])) / 2.0
    elif kind == "lognormal":
        mean = float(dist["median"]) * math.exp(float(dist["sigma"]) ** 2 / 2.0)
    elif kind == "normal":
        mean = float(dist["mean"])
    else:
        raise RelativeError(f"cannot take the mean of a {kind!r} length distribution")
    return min(max(mean, float(low)), float(high))


def _mix_mean(params: Mapping[str, Any], what: str, default: float) -> float:
    main = _mean_tokens(params.get(f"{what}_tokens", default))
    for other in ("long", "batch"):
        share_key, tokens_key = f"{other}_share", f"{other}_{what}_tokens"
        if share_key in params and tokens_key in params:
            share = float(params[share_key])
            return (1.0 - share) * main + share * _mean_tokens(params[tokens_key])
    return main


def mix_output_tokens(params: Mapping[str, Any]) -> float:
    """Mean output tokens per request of a resolved profile's mix."""
    return _mix_mean(params, "output", 12)


def mix_request_tokens(params: Mapping[str, Any]) -> float:
    """Mean prompt + output tokens per request: what one request holds in the KV cache."""
    return _mix_mean(params, "prompt", 40) + mix_output_tokens(params)


def _reference(calibration: Calibration, what: str) -> float:
    """The short mix's output tokens/s at capacity (`capacity`), its unloaded E2E median
    (`unloaded`) or the KV capacity in tokens (`kv`), from a phase that was a valid
    measurement; else the run stops (exit 5): a profile sized by a saturated client's capacity
    would under-load the target and let its gates pass on load it never saw."""
    if what == "kv":
        value, path = kv_capacity_tokens(calibration), "kv_capacity.tokens"
    else:
        problem = phase_problem(calibration, what)
        if problem is not None:
            raise RelativeError(problem, ExitCode.NO_DATA)
        if what == "capacity":
            value, _ = saturated_rate(calibration, "output_tokens_per_second", "short")
            path = "capacity.short.output_tokens_per_second"
        else:
            value, _ = unloaded_median(calibration, "e2e", "short")
            path = "unloaded.short.e2e.p50"
    if value is None:
        raise RelativeError(
            f"calibration has no {path}: cannot resolve a relative profile value",
            ExitCode.NO_DATA,
        )
    return float(value)


def absolute_overrides(
    overrides: Mapping[str, Any],
    relative: Mapping[str, str],
    params: Mapping[str, Any],
    calibration: Calibration,
) -> dict[str, Any]:
    """The overrides with every relative value resolved against `calibration`.

    `params` are the profile's resolved parameters (placeholders in), for the mix's mean
    output length and for the rates that durations divide by.
    """
    out = dict(overrides)
    # Rates first: a duration of "N requests" divides by its stage's resolved rate.
    for key, text in sorted(relative.items(), key=lambda item: item[0] not in _RATE_KEYS):
        try:
            out[key] = _absolute(key, text, out, params, calibration)
        except RelativeError as exc:
            raise RelativeError(f"{key} {text!r}: {exc}", exc.exit_code) from None
    return out


def _absolute(
    key: str,
    text: str,
    resolved: Mapping[str, Any],
    params: Mapping[str, Any],
    calibration: Calibration,
) -> float | dict[str, float]:
    """One relative value as a number (a time scale: the output-token rate it asks for);
    `resolved` holds the rates resolved so far."""
    factor = _FACTOR_RE.match(text)
    if key in _TIME_SCALE_KEYS:
        multiple = float(factor.group(1))  # type: ignore[union-attr]
        return {"output_tokens_per_second": multiple * _reference(calibration, "capacity")}
    if key in _RATE_KEYS:
        multiple, what = factor.groups()  # type: ignore[union-attr]
        if what == "lone":
            return float(multiple) / _reference(calibration, "unloaded")
        return float(multiple) * _reference(calibration, "capacity") / mix_output_tokens(params)
    count = _COUNT_RE.match(text)
    if count is not None:
        requests = float(count.group(1))
    elif factor is not None and factor.group(2) == "kv":
        kv_tokens = _reference(calibration, "kv")
        requests = math.ceil(float(factor.group(1)) * kv_tokens / mix_request_tokens(params))
    else:
        return float(factor.group(1)) * _reference(calibration, "unloaded")  # type: ignore[union-attr]
    rate_key = _DURATION_RATE[key]
    rate = resolved.get(rate_key, params.get(rate_key))
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise RelativeError(f"needs a positive {rate_key} to count requests")
    return requests / float(rate)
