"""`batchgate tune` refuses bad input with exit 2 (or 4 for the gates file) and a message naming
what is wrong, before it starts any server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _tune(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", "tune", "--out", str(tmp_path / "runs"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--profile", "night_trickle", "--knobs", "colour"], 2, "unknown knob 'colour'"),
        (["--profile", "night_trickle", "--values", "policy=fast"], 2, "not one of"),
        (["--profile", "night_trickle", "--budget", "soon"], 2, "--budget"),
        (["--profile", "night_trickle", "--budget", "0s"], 2, "--budget must be > 0"),
        (["--profile", "night_trickle", "--objective", "speed"], 2, "--objective"),
        (["--profile", "night_trickle", "--objective", "ttft:rate"], 2, "takes"),
        (["--profile", "night_trickle", "--preset-name", "Bad-Name"], 2, "--preset-name"),
        (["--profile", "night_trickle", "--preset-name", "safe"], 2, "exists already"),
        (["--profile", "no_such_profile"], 2, "no_such_profile"),
        (["--profile", "night_trickle", "--calibration", "off"], 2, "--calibration off"),
        (["--profile", "night_trickle", "--reference", "policy=static"], 2, "--server-cmd"),
        (["--profile", "night_trickle", "--server-cmd", "x {port}", "--preset", "static"], 2,
         "--preset"),
    ],
)  # fmt: skip
def test_bad_input(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    result = _tune(tmp_path, *args)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_gates_file_with_a_reserved_gate_name(tmp_path: Path) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text(
        "version: 1\ngates:\n  - name: tune_objective\n    metric: errors\n"
        "    statistic: count\n    fail: '== 0'\n",
        encoding="utf-8",
    )
    result = _tune(tmp_path, "--profile", "steady", "--gates", str(gates))
    assert result.returncode == 2 and "kept for batchgate tune" in result.stderr
