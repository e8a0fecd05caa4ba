"""bench_server.py refuses counts below 1 with a usage error naming the flag (exit 2), before it
starts a server; --repeats 0 used to start both servers and end in a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_server.py"


@pytest.mark.parametrize("flag", ["--repeats", "--requests", "--low-load-requests", "--max-tokens"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_count_below_one_is_a_usage_error(flag: str, value: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), flag, value, "--output", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"{flag} must be at least 1" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()
