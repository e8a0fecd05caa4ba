"""A preset applied to a live --target is recorded and taken back at the end of the run, unless
--keep-preset; either way the manifest keeps the settings it replaced."""

from __future__ import annotations

import subprocess
from pathlib import Path

import e2e_support
import httpx
import pytest
from e2e_support import RUN_TIMEOUT_SECONDS, batchgate_argv, read_json

pytestmark = pytest.mark.slow

SHORT = ("--profile", "night_trickle", "--set", "night_trickle.main_seconds=200")


@pytest.fixture
def bundled_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    with e2e_support.bundled_server(tmp_path) as url:
        yield url


def _run(tmp_path: Path, url: str, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        batchgate_argv(
            "run",
            "--target",
            url,
            "--preset",
            "big_window",
            "--scale",
            "smoke",
            "--out",
            str(tmp_path / "runs"),
            "--run-id",
            run_id,
            *SHORT,
            *extra,
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )


def _batching(url: str) -> dict:  # type: ignore[type-arg]
    body = httpx.get(url + "/admin/batching", timeout=5).json()
    return body.get("settings", body)


def test_a_live_preset_is_restored_after_the_run_unless_kept(tmp_path, bundled_server):
    before = _batching(bundled_server)
    done = _run(tmp_path, bundled_server, "restored")
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "restored the batching settings" in done.stdout + done.stderr
    calibration = read_json(tmp_path / "runs" / "restored" / "calibration.json")
    # Calibrated before the preset was applied: a lone request did not wait out its window
    # (every request that did took >= the preset's 200 ms, whatever the machine's speed).
    assert calibration["unloaded"]["short"]["ttft"]["p50"] < 0.2
    assert _batching(bundled_server) == before
    manifest = read_json(tmp_path / "runs" / "restored" / "manifest.json")
    assert manifest["replaced_settings"] == before

    kept = _run(tmp_path, bundled_server, "kept", "--keep-preset")
    assert kept.returncode in (0, 1), kept.stderr[-3000:]
    after = _batching(bundled_server)
    assert after["policy"] == "dynamic" and after["interactive"]["max_wait_ms"] == 200
    assert read_json(tmp_path / "runs" / "kept" / "manifest.json")["replaced_settings"] == before
