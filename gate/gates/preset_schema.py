"""Validation of a gates file's `presets:` (rollback batching settings) and `profiles:` sections.

Owns the preset schema: which batching keys a preset may set (policy, sequence and token limits,
shared queue, KV cache bytes, per-class queue settings, sampling alignment and the shared-seed
bug) and the type of each. It does not apply
presets to a server (`gate.rollback`) and does not know gates.
"""

from __future__ import annotations

from typing import Any

from gate.gates.reader import NAME_RE, FieldReader
from gate.units import UnitError, UnitKind, parse_quantity

__all__ = ["PresetReader"]

_POLICIES = ("continuous", "dynamic", "static", "slo")
_PRIORITIES = ("batch", "interactive")
# Batch alignment (issue 39): "mixed" batches requests whatever their sampling parameters, each
# row sampled with its own; "strict" only requests of one sampling signature (one at a time
# when every request has its own seed).
_ALIGNMENTS = ("mixed", "strict")
_CLASS_KEYS = {
    "max_waiting": "int0",
    "max_batch_size": "int1",
    "max_wait_ms": "num0",
    "dispatch_threshold": "opt_int1",  # null = adaptive dispatch off (the server's default)
}
_PRESET_KEYS = {
    "policy": "policy",
    "max_num_seqs": "int1",
    "max_num_batched_tokens": "int1",
    "max_prefill_chunk_tokens": "int1",  # the server refuses 0 (a rollback must not find out)
    "shared_queue": "bool",
    "enable_prefix_caching": "bool",
    "batch_api_priority": "priority",
    "batch_max_running_with_interactive": "opt_int1",
    "interactive_active_ms": "num0",
    "slo_target_ms": "num0",
    "slo_min_prefill_tokens": "int1",
    "kv_cache_memory_bytes": "bytes",
    "num_gpu_blocks_override": "int1",
    "sampling_alignment": "alignment",
    "shared_sampler_seed": "bool",  # a bug on purpose: seeded requests share one generator
    "interactive": "class",
    "batch": "class",
}


class PresetReader(FieldReader):
    """Reads `presets:` and `profiles:` into plain dictionaries, validated."""

    def presets(self, raw: Any, kp: str) -> dict[str, dict[str, Any]]:
        raw = self.mapping(raw, kp, tuple(raw) if isinstance(raw, dict) else ())
        presets: dict[str, dict[str, Any]] = {}
        for name, body in raw.items():
            if not NAME_RE.match(str(name)):
                raise self.err(f"{kp}.{name}", "preset names use letters, digits, _ . -")
            body = self.mapping(body, f"{kp}.{name}", tuple(_PRESET_KEYS))
            presets[str(name)] = {
                k: self.preset_value(v, _PRESET_KEYS[k], f"{kp}.{name}.{k}")
                for k, v in body.items()
            }
        return presets

    def preset_value(self, value: Any, kind: str, kp: str) -> Any:
        if kind == "policy":
            if value not in _POLICIES:
                raise self.err(kp, f"policy must be one of {', '.join(_POLICIES)}")
            return value
        if kind == "alignment":
            if value not in _ALIGNMENTS:
                raise self.err(kp, f"must be one of {', '.join(_ALIGNMENTS)}, got {value!r}")
            return value
        if kind == "priority":
            if value not in _PRIORITIES:
                raise self.err(kp, f"must be one of {', '.join(_PRIORITIES)}, got {value!r}")
            return value
        if kind == "bool":
            return self.boolean(value, kp)
        if kind == "bytes":
            try:
                size = parse_quantity(value, kind=UnitKind.BYTES)
            except UnitError as exc:
                raise self.err(kp, str(exc)) from None
            if size <= 0:
                raise self.err(kp, "must be positive")
            return int(size)
        if kind == "class":
            body = self.mapping(value, kp, tuple(_CLASS_KEYS))
            return {k: self.preset_value(v, _CLASS_KEYS[k], f"{kp}.{k}") for k, v in body.items()}
        if kind == "opt_int1":
            # A rollback target must be able to switch adaptive dispatch back off.
            return None if value is None else self.preset_value(value, "int1", kp)
        if kind in ("int0", "int1"):
            if isinstance(value, bool) or not isinstance(value, int) or value < int(kind[-1]):
                raise self.err(kp, f"expected an integer >= {kind[-1]}, got {value!r}")
            return value
        number = self.number(value, kp, low=0.0)
        return int(number) if float(number).is_integer() and isinstance(value, int) else number

    def profiles(self, raw: Any, kp: str) -> dict[str, dict[str, Any]]:
        raw = self.mapping(raw, kp, tuple(raw) if isinstance(raw, dict) else ())
        for name, body in raw.items():
            if not isinstance(body, dict):
                raise self.err(f"{kp}.{name}", "expected a mapping of profile parameter overrides")
        return {str(k): dict(v) for k, v in raw.items()}
