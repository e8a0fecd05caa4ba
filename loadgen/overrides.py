"""Profile parameter overrides: setting one (possibly dotted) key in a parameter dict.

Owns the rules for overriding a profile parameter: the key must exist (unknown keys are errors
that name the key and list the known ones), values keep the default's type, dotted keys reach
into mapping values (length distributions are validated later by `LengthDist`; `extra_body` is
free-form). It does not know which profiles exist.
"""

from __future__ import annotations

from typing import Any

from loadgen.errors import ConfigError

__all__ = ["apply_override"]


def apply_override(params: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` (dotted paths reach into mapping values) after checking it exists and its type."""
    head, _, rest = key.partition(".")
    if head not in params:
        raise ConfigError(f"unknown profile parameter {head!r}; known: {', '.join(sorted(params))}")
    if rest:
        inner = params[head]
        if not isinstance(inner, dict):
            raise ConfigError(f"profile parameter {head!r} is not a mapping, cannot set {key!r}")
        if head == "extra_body":
            inner[rest] = value  # free-form: passed to the server as is
            return
        if head.endswith("_tokens"):
            inner[rest] = value  # LengthDist validates the keys
            return
        apply_override(inner, rest, value)
        return
    params[head] = _coerce(head, params[head], value)


# The parameters whose default is null ("not set"), each with a value of the type it takes.
_NULLABLE: dict[str, Any] = {
    "duration_seconds": 0.0,
    "rate_rps": 0.0,
    "dataset": "",
    "path": "",
    "max_input_tokens": 0,
    "max_output_tokens": 0,
    "context_tokens": 0,
    "token_units": [],
}
# Parameters that take more than one type; the profile that owns them checks their value.
_FREE_FORM = frozenset({"time_scale"})


def _coerce(key: str, default: Any, value: Any) -> Any:
    if key in _FREE_FORM:
        return value
    if value is None:
        if default is None:
            return value
        # Only a parameter whose default is null may be unset: the others mean nothing without one.
        raise ConfigError(f"profile parameter {key!r} cannot be null (its default: {default!r})")
    if default is None:
        if key not in _NULLABLE:
            return value
        default = _NULLABLE[key]  # checked like a set default of its type, below
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"profile parameter {key!r} must be true/false, got {value!r}")
        return value
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"profile parameter {key!r} must be a number, got {value!r}")
        if isinstance(default, float):
            return float(value)
        if value != int(value):
            raise ConfigError(f"profile parameter {key!r} must be an integer, got {value!r}")
        return int(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"profile parameter {key!r} must be a string, got {value!r}")
    if key.endswith("_tokens") and isinstance(value, (int, dict)):
        return value
    if isinstance(default, dict) and not isinstance(value, dict):
        raise ConfigError(f"profile parameter {key!r} must be a mapping, got {value!r}")
    return value
