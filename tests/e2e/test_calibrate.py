"""`batchgate calibrate` measures the bundled server alone, and `--calibration auto` reuses a
saved calibration of the same target, settings and hardware instead of measuring again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_support import RUN_TIMEOUT_SECONDS

pytestmark = pytest.mark.slow


def _calibrate(cwd: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [
            *(sys.executable, "-m", "gate.cli", "calibrate", "--calibration", "auto"),
            *("--out", str(cwd / "runs"), "--run-id", run_id),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )


def test_calibrate_measures_then_auto_reuses_the_saved_calibration(tmp_path):
    first = _calibrate(tmp_path, "a")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    data = json.loads((tmp_path / "runs" / "calibrate-a" / "calibration.json").read_text())
    unloaded = data["unloaded"]["short"]
    assert unloaded["ttft"]["n"] >= 5 and 0 < unloaded["ttft"]["p50"] <= unloaded["e2e"]["p50"]
    capacity = data["capacity"]["short"]
    assert capacity["rps_low"] <= capacity["rps"] <= capacity["rps_high"]
    assert capacity["users"] == 64 and capacity["n"] > 64
    assert data["kv_capacity"] == {"tokens": 4096 * 16, "source": "batchgate_kv_capacity_tokens"}
    assert data["source"] == "auto: measured"
    # Only a valid measurement is saved for reuse (a saturated client's would be refused).
    assert all(phase["measurement_valid"] for phase in data["client"].values()), data["client"]
    assert "capacity (64 closed-loop users)" in first.stdout
    stored = list((tmp_path / ".batchgate" / "calibrations").glob("*.json"))
    assert len(stored) == 1

    second = _calibrate(tmp_path, "b")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    again = json.loads((tmp_path / "runs" / "calibrate-b" / "calibration.json").read_text())
    assert again["source"] == "auto: reused"
    assert again["unloaded"] == data["unloaded"] and again["capacity"] == data["capacity"]
    assert not (tmp_path / "runs" / "calibrate-b" / "calibration").exists()  # nothing measured
