"""A gates-file preset as the bundled server's start flags, or as a live settings change.

Owns the split of preset keys into start-only engine settings (`kv_cache_memory_bytes`,
`num_gpu_blocks_override`: the KV pool is sized once, so they can only be flags) and live batching
settings (everything `PUT /admin/batching` accepts), and the spelling of each as a
`python -m reference_server` flag. Preset values were validated by `gate.gates.file`; this
module does not re-check ranges (the server refuses bad values with a message naming the flag).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "REFERENCE_PRESET",
    "START_ONLY_KEYS",
    "PresetError",
    "live_settings",
    "server_flags",
    "start_only",
]

# The preset a calibration is taken with when a run tries another one (docs/calibration.md).
REFERENCE_PRESET = "safe"

# Preset keys the server reads once at start; PUT /admin/batching refuses them.
START_ONLY_KEYS = ("kv_cache_memory_bytes", "num_gpu_blocks_override")
_CLASSES = ("interactive", "batch")


class PresetError(BatchgateError, ValueError):
    """A preset that cannot be applied the way the run needs it (message says why)."""

    default_exit_code = ExitCode.USAGE


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 2**53 else repr(value)
    return str(value)


def server_flags(preset: Mapping[str, Any]) -> list[str]:
    """Every preset key as a `python -m reference_server` flag, in the preset's order."""
    flags: list[str] = []
    for key, value in preset.items():
        if key in _CLASSES:
            if not isinstance(value, Mapping):
                raise PresetError(f"preset key {key!r} must map class settings, got {value!r}")
            for inner, inner_value in value.items():
                flags += [_flag(f"{key}_{inner}"), _value(inner_value)]
        elif isinstance(value, bool):
            flags.append(_flag(key) if value else _flag(f"no_{key}"))
        else:
            flags += [_flag(key), _value(value)]
    return flags


def start_only(preset: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in preset.items() if k in START_ONLY_KEYS}


def live_settings(preset: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a preset `PUT /admin/batching` takes (a partial settings object)."""
    return {
        k: (dict(v) if isinstance(v, Mapping) else v)
        for k, v in preset.items()
        if k not in START_ONLY_KEYS
    }
