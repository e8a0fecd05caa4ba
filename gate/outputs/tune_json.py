"""tune.json (docs/tune.md): what `batchgate tune` tried, measured and chose.

Owns the file's keys and their order: the profile, the objective, the budget and rungs, the
knobs and their grids, the incumbent, the winner and the files its preset went into, the runs
left out for the budget, how the search ended, the calibration it was judged against (its
`unloaded` and `capacity` sections as calibration.json has them) and every candidate with its
runs. It takes plain data (the tune stage's `to_dict` forms) and decides nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gate.calibration.content import Calibration

__all__ = ["TUNE_FILE", "write_tune_json"]

TUNE_FILE = "tune.json"


def write_tune_json(
    path: Path,
    *,
    profile: str,
    objective: Mapping[str, Any],  # metric, statistic, higher_is_better
    budget_seconds: float,
    rungs: Sequence[str],
    knobs: Mapping[str, list[Any]],
    incumbent: Mapping[str, Any],
    winner: Mapping[str, Any] | None,
    preset_name: str,
    preset_files: tuple[Path, Path, Path | None] | None,  # preset.yaml, gates copy, added to
    preset_error: str | None,
    runs_skipped_for_budget: int,
    ended: str,
    calibration: Calibration,
    candidates: Sequence[Mapping[str, Any]],
) -> None:
    preset = None
    if preset_files is not None:
        block, copy, added_to = preset_files
        preset = {
            "name": preset_name,
            "file": str(block),
            "gates_file": str(copy),
            "added_to": None if added_to is None else str(added_to),
        }
    data = {
        "schema_version": 1,
        "profile": profile,
        "objective": dict(objective),
        "budget_seconds": budget_seconds,
        "rungs": list(rungs),
        "knobs": dict(knobs),
        "incumbent": incumbent,
        "winner": winner,
        "preset": preset,
        "preset_error": preset_error,
        "runs_skipped_for_budget": runs_skipped_for_budget,
        "ended": ended,
        "calibration": calibration.as_written("unloaded", "capacity"),
        "candidates": list(candidates),
    }
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
