"""The knob space of `batchgate tune`: which batching settings it varies and the values it tries.

Owns knob names (short forms such as `max_wait_ms` for `interactive.max_wait_ms`), each knob's
default grid, parsing `--knobs` and `--values`, turning a candidate's knob values into a gates-file
preset (nested class settings), a stable key for a candidate's settings (so a candidate that
repeats reuses its measurements), and the neighbours of a value used to refine near the best. It
does not measure or search (`gate.tune.runner`, `gate.tune.search`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.errors import UsageError

__all__ = [
    "DEFAULT_KNOBS",
    "Knob",
    "KnobSpace",
    "candidate_key",
    "flatten_settings",
    "normalised",
    "parse_knobs",
    "parse_setting",
    "preset_of",
    "short_name",
]

DEFAULT_KNOBS = ("policy", "max_wait_ms", "max_num_seqs", "max_num_batched_tokens")

# Short name -> preset key path. Class settings without a class name mean the interactive one
# (the class whose latency a gate usually watches); `batch.max_wait_ms` names the other.
_ALIASES = {
    "max_wait_ms": "interactive.max_wait_ms",
    "max_batch_size": "interactive.max_batch_size",
    "dispatch_threshold": "interactive.dispatch_threshold",
}
_CLASS_KEYS = ("max_waiting", "max_batch_size", "max_wait_ms", "dispatch_threshold")
_CHOICES = {
    "policy": ("continuous", "dynamic", "static", "slo"),
    "shared_queue": (False, True),
    "batch_api_priority": ("batch", "interactive"),
}
# Default grids: around the bundled server's defaults, a factor 2-4 apart (the refinement step
# fills in between). slo_target_ms has none here: its grid comes from the calibrated service
# time (`KnobSpace.with_calibration`), since a fixed millisecond list fits one machine only.
_GRIDS: dict[str, tuple[Any, ...]] = {
    "interactive.max_wait_ms": (0, 5, 20, 50, 200),
    "batch.max_wait_ms": (0, 20, 50, 200),
    "interactive.max_batch_size": (4, 8, 16, 32),
    "batch.max_batch_size": (8, 16, 32, 64),
    "max_num_seqs": (16, 32, 64, 128),
    "max_num_batched_tokens": (512, 1024, 2048, 4096),
    "max_prefill_chunk_tokens": (128, 256, 512, 1024),
    "batch_max_running_with_interactive": (1, 2, 4, 8),
    "slo_min_prefill_tokens": (16, 32, 64, 128),
}
_INTEGER = {
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_prefill_chunk_tokens",
    "batch_max_running_with_interactive",
    "slo_min_prefill_tokens",
    "num_gpu_blocks_override",
    "kv_cache_memory_bytes",
    "interactive.max_batch_size",
    "batch.max_batch_size",
    "interactive.max_waiting",
    "batch.max_waiting",
}
_START_ONLY = {"num_gpu_blocks_override", "kv_cache_memory_bytes"}
# slo_target_ms grid: multiples of the calibrated unloaded time per output token (one decode step
# of a lone request), so the grid means the same on any target.
SLO_TARGET_TPOT_MULTIPLES = (1.5, 3.0, 6.0, 12.0)


@dataclass(frozen=True)
class Knob:
    path: str  # preset key path: "max_num_seqs", "interactive.max_wait_ms"
    values: tuple[Any, ...]

    @property
    def numeric(self) -> bool:
        return self.path not in _CHOICES

    @property
    def start_only(self) -> bool:
        return self.path in _START_ONLY


def _canonical(name: str) -> str:
    path = _ALIASES.get(name, name)
    head, _, tail = path.partition(".")
    known = set(_GRIDS) | set(_CHOICES) | _INTEGER | {"slo_target_ms"}
    if tail:
        if head not in ("interactive", "batch") or tail not in _CLASS_KEYS:
            raise UsageError(f"unknown knob {name!r} (class knobs: interactive.KEY, batch.KEY)")
    elif path not in known:
        options = ", ".join(sorted({*_ALIASES, *(k for k in known if "." not in k)}))
        raise UsageError(f"unknown knob {name!r}; knobs: {options}")
    return path


def _parse_value(path: str, text: str) -> Any:
    text = text.strip()
    if path in _CHOICES:
        choices = _CHOICES[path]
        by_text = {str(c).lower(): c for c in choices}
        if text.lower() not in by_text:
            raise UsageError(
                f"--values {path}: {text!r} is not one of {', '.join(map(str, choices))}"
            )
        return by_text[text.lower()]
    if text.lower() in ("none", "null") and path.endswith(
        ("dispatch_threshold", "batch_max_running_with_interactive")
    ):
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--values {path}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--values {path}: {text!r} must be a finite number >= 0")
    if path in _INTEGER:
        if not value.is_integer() or value < 1:
            raise UsageError(f"--values {path}: {text!r} must be an integer >= 1")
        return int(value)
    return int(value) if value.is_integer() else value


def parse_knobs(
    knobs_text: str | None, values: Sequence[str]
) -> list[tuple[str, tuple[Any, ...] | None]]:
    """`--knobs a,b` and `--values KNOB=v1,v2` -> [(path, values or None for the default grid)].
    A knob named only in --values joins the knobs. Raises UsageError (exit 2)."""
    names = [n.strip() for n in (knobs_text or ",".join(DEFAULT_KNOBS)).split(",") if n.strip()]
    if not names:
        raise UsageError("--knobs names no knob")
    paths = [_canonical(n) for n in names]
    given: dict[str, tuple[Any, ...]] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        if not sep or not rest.strip():
            raise UsageError(f"--values wants KNOB=v1,v2,..., got {item!r}")
        path = _canonical(name.strip())
        parsed = tuple(_parse_value(path, v) for v in rest.split(",") if v.strip())
        if not parsed:
            raise UsageError(f"--values {name}: no values")
        given[path] = tuple(dict.fromkeys(parsed))
        if path not in paths:
            paths.append(path)
    if len(set(paths)) != len(paths):
        raise UsageError("--knobs names a knob twice")
    return [(p, given.get(p)) for p in paths]


def parse_setting(item: str, flag: str) -> tuple[str, Any]:
    """`KNOB=VALUE` -> (preset key path, value); raises UsageError naming `flag`."""
    name, sep, text = item.partition("=")
    if not sep or not text.strip():
        raise UsageError(f"{flag} wants KNOB=VALUE, got {item!r}")
    path = _canonical(name.strip())
    return path, _parse_value(path, text)


class KnobSpace:
    """The knobs tuned and their values (the incumbent's value joins each grid)."""

    def __init__(self, knobs: Sequence[Knob]) -> None:
        self.knobs = tuple(knobs)

    @classmethod
    def build(
        cls,
        parsed: Sequence[tuple[str, tuple[Any, ...] | None]],
        *,
        incumbent: Mapping[str, Any],
        unloaded_tpot_seconds: float | None,
    ) -> KnobSpace:
        knobs = []
        for path, values in parsed:
            if values is None:
                values = _default_grid(path, unloaded_tpot_seconds)
            current = incumbent.get(path)
            if current is not None and current not in values:
                values = (*values, current)
            if path not in _CHOICES:
                values = tuple(sorted(values, key=lambda v: -1 if v is None else v))
            knobs.append(Knob(path, tuple(values)))
        return cls(knobs)

    def by_path(self, path: str) -> Knob:
        return next(k for k in self.knobs if k.path == path)

    def neighbours(self, path: str, value: Any) -> list[Any]:
        """Values between `value` and its neighbours on the grid (geometric midpoints), for the
        refinement near the best: [] for choice knobs and values off the grid."""
        knob = self.by_path(path)
        if not knob.numeric or value is None or value not in knob.values:
            return []
        grid = [v for v in knob.values if v is not None]
        i = grid.index(value)
        out = []
        for other in (grid[i - 1] if i > 0 else None, grid[i + 1] if i + 1 < len(grid) else None):
            if other is None:
                continue
            mid = math.sqrt(value * other) if value > 0 and other > 0 else (value + other) / 2
            mid = round(mid) if path in _INTEGER or float(mid) >= 10 else round(mid, 2)
            if mid not in (value, other) and mid not in out:
                out.append(mid)
        return out


def _default_grid(path: str, unloaded_tpot_seconds: float | None) -> tuple[Any, ...]:
    if path in _CHOICES:
        return _CHOICES[path]
    if path in _GRIDS:
        return _GRIDS[path]
    if path == "slo_target_ms":
        if unloaded_tpot_seconds is None or unloaded_tpot_seconds <= 0:
            raise UsageError(
                "slo_target_ms has no default grid without a calibrated time per output token; "
                "give --values slo_target_ms=10,25,50"
            )
        ms = unloaded_tpot_seconds * 1000.0
        return tuple(round(max(0.1, k * ms), 1) for k in SLO_TARGET_TPOT_MULTIPLES)
    raise UsageError(f"knob {path!r} has no default grid; give --values {path}=v1,v2,...")


def preset_of(settings: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """{path: value} -> a gates-file preset ({"interactive": {"max_wait_ms": 5}, ...}), on top of
    `base` (a preset: class settings merged key by key). A start-only key whose value is None
    means "the server's default" and is left out."""
    preset: dict[str, Any] = {
        k: (dict(v) if isinstance(v, Mapping) else v) for k, v in (base or {}).items()
    }
    for path, value in settings.items():
        if value is None and path in _START_ONLY:
            continue
        head, _, tail = path.partition(".")
        if tail:
            preset.setdefault(head, {})[tail] = value
        else:
            preset[path] = value
    return preset


def normalised(value: Any) -> Any:
    """20.0 and 20 are one setting (a server reports floats, a grid holds ints)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def flatten_settings(
    batching: Mapping[str, Any] | None,
    paths: Sequence[str],
    start_preset: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The values of `paths` in a server's batching settings (GET /admin/batching). A start-only
    knob (the KV size) is not among them: its value is the one the server was started with
    (`start_preset`), else None, "the server's default"."""
    out: dict[str, Any] = {}
    for path in paths:
        if path in _START_ONLY:
            out[path] = normalised((start_preset or {}).get(path))
            continue
        node: Any = batching or {}
        found = True
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                found = False
                break
        if found:
            out[path] = normalised(node)
    return out


def short_name(path: str) -> str:
    """The name a person types for a knob (`max_wait_ms` for `interactive.max_wait_ms`)."""
    return next((alias for alias, full in _ALIASES.items() if full == path), path)


def candidate_key(settings: Mapping[str, Any]) -> str:
    """One string per distinct setting of the knobs (dict order does not matter)."""
    return ", ".join(f"{k}={normalised(settings[k])}" for k in sorted(settings))
