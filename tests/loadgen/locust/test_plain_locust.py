"""The plain `locust -f loadgen/locustfile.py` path: options, install (standalone) and events."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lg_support import REPO, read_load, read_records


@pytest.mark.slow
def test_plain_locust_headless_runs_a_profile_and_fires_ttft_and_e2e_events(
    fake_server, tmp_path
) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
    out = tmp_path / "burst"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "loadgen/locustfile.py",
            "--headless",
            "-u",
            "1",
            "-r",
            "1",
            "--host",
            server.url,
            "--loadgen-profile",
            "burst",
            "--loadgen-overrides-json",
            '{"duration_seconds": 1.5, "rate_rps": 15}',
            "--loadgen-out",
            str(out),
            "--csv",
            str(tmp_path / "locust"),
            "--only-summary",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records, load = read_records(out), read_load(out)
    assert load["ended"] == "completed" and len(records) == server.stats()["requests_total"]
    stats = (tmp_path / "locust_stats.csv").read_text()
    assert "TTFT,chat:spike" in stats and "E2E,chat:spike" in stats
