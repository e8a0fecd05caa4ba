"""sweep.json (docs/run.md): the rates `batchgate sweep` tried and the knee it found.

Owns the file's keys and their order: the profile, scale, target, preset and gates file the
search ran with, the rates it searched between, its settings, the knee (the highest passing
rate), the first failing rate above it, the gate that binds there, how it ended, and every point.
It takes plain data (the sweep's points as `to_dict` forms) and decides nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SWEEP_FILE", "write_sweep_json"]

SWEEP_FILE = "sweep.json"


def write_sweep_json(
    path: Path,
    *,
    profile: str,
    scale: str,
    target: str | None,
    preset: str | None,
    gates_file: str,
    min_rate_rps: float | None,
    max_rate_rps: float | None,
    requests_per_point: int,
    tolerance: float,
    knee_rps: float | None,
    first_failing_rps: float | None,
    binding_gate: str | None,
    ended: str,
    points: Sequence[Mapping[str, Any]],
) -> None:
    data = {
        "schema_version": 1,
        "profile": profile,
        "scale": scale,
        "target": target,
        "preset": preset,
        "gates_file": gates_file,
        "min_rate_rps": min_rate_rps,
        "max_rate_rps": max_rate_rps,
        "requests_per_point": requests_per_point,
        "tolerance": tolerance,
        "knee_rps": knee_rps,
        "first_failing_rps": first_failing_rps,
        "binding_gate": binding_gate,
        "ended": ended,
        "points": list(points),
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
