"""Reading and writing calibration.json (docs/calibration.md).

Owns the file's one reader for a calibration a run is given (`--calibration FILE`, the reuse
store): unreadable, of another schema version or with a field of the wrong type, it is refused
with `file: what is wrong` (usage, exit 2); and its one writer (two-space JSON, no NaN, replaced
whole so a reader never sees half a file), which writes a `Calibration`'s document as it is, so
the same calibration is always the same bytes. A run directory's copy is read by
`gate.rundir.run`, which judges a damaged one no data instead of refusing it. It does not
measure anything.
"""

from __future__ import annotations

import json
from pathlib import Path

from gate.calibration.content import (
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    CalibrationError,
    parse_calibration,
)
from gate.errors import ExitCode

__all__ = ["read_calibration", "write_calibration"]


def read_calibration(path: Path) -> Calibration:
    """A saved calibration.json; raises CalibrationError (usage, exit 2) when unusable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{path}: cannot read calibration: {exc}", ExitCode.USAGE) from None
    if not isinstance(data, dict) or data.get("schema_version") != CALIBRATION_SCHEMA_VERSION:
        raise CalibrationError(
            f"{path}: not a calibration.json of schema version {CALIBRATION_SCHEMA_VERSION}",
            ExitCode.USAGE,
        )
    try:
        return parse_calibration(data, name=str(path))
    except CalibrationError as exc:
        raise CalibrationError(str(exc), ExitCode.USAGE) from None


def write_calibration(path: Path, calibration: Calibration) -> None:
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(calibration.to_json(), indent=2, allow_nan=False) + "\n"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
