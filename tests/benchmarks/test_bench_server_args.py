"""bench_server.py's bad input: counts below 1, a negative --client-nice and an engine setting the
engine refuses are usage errors naming the flag (exit 2) before any server starts; a workload a
server refuses (--max-tokens over its cap) ends with the server's reason and exit 1 after the
servers are stopped. Never a traceback; --repeats 0 used to start both servers and end in one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_server", *args,
         "--output", str(tmp_path / "out.json")],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--requests", "-3"], "--requests must be at least 1"),
        (["--low-load-requests", "0"], "--low-load-requests must be at least 1"),
        (["--max-tokens", "0"], "--max-tokens must be at least 1"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be at least 1"),
        (["--torch-threads", "-1"], "--torch-threads must be at least 1"),
        (["--client-nice", "-5"], "--client-nice must be at least 0"),
        (["--device", "bogus"], "device: must be one of"),
    ],
)
def test_bad_settings_are_usage_errors(tmp_path: Path, args: list[str], said: str) -> None:
    result = _bench(tmp_path, *args)
    assert result.returncode == 2
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_a_workload_the_server_refuses_is_its_reason_and_exit_1(tmp_path: Path) -> None:
    result = _bench(
        tmp_path, "--max-tokens", "100000", "--requests", "2", "--repeats", "1",
        "--engine-core", "process", timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert "error: a run failed:" in result.stderr
    assert "exceeds the server cap" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()
