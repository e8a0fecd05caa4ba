"""`batchgate run` with an `abort_on_fail` gate that is sure to fail stops the run early: exit 1,
long before the profile's schedule ends, the gate's verdict a failure with the abort reason,
the artifacts kept, the later profile not run, nothing left behind — and `batchgate check`
on the saved run gives exactly the same verdicts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from e2e_support import (
    REPO,
    assert_no_strays,
    batchgate_argv,
    ctrl_c_as_default,
    read_json,
    verdict,
)

pytestmark = pytest.mark.slow

PROFILE_SECONDS = 30.0  # steady.main_seconds=600 at smoke scale (x0.05)
GATES = """\
version: 1
settings: {abort_grace_seconds: 3s}
gates:
  - name: ttft_p50_impossible
    metric: ttft
    statistic: p50
    scope: {profile: steady}
    fail: "< 1ms"
    abort_on_fail: true
  - name: no_errors
    metric: errors
    statistic: mean
    fail: "< 1%"
"""


def test_a_sure_failure_stops_the_run_early_and_check_agrees(tmp_path: Path) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    out = tmp_path / "runs"
    argv = batchgate_argv(
        "run",
        "--gates",
        str(gates),
        "--scale",
        "smoke",
        "--profile",
        "steady,night_trickle",
        "--set",
        "steady.main_seconds=600",
        "--out",
        str(out),
        "--run-id",
        "aborted",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    result = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
        preexec_fn=ctrl_c_as_default,
    )
    run_dir = out / "aborted"
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "stopped early by abort_on_fail" in result.stderr

    abort = read_json(run_dir / "steady" / "abort.json")
    assert abort["gate"] == "ttft_p50_impossible" and abort["profile"] == "steady"
    assert 3.0 <= abort["elapsed_seconds"] < PROFILE_SECONDS / 2

    verdicts = read_json(run_dir / "verdicts.json")
    stopped = verdict(verdicts, "ttft_p50_impossible@steady")
    assert stopped["status"] == "fail"
    assert stopped["reason"].startswith("aborted the run early: confident failure after ")
    assert stopped["n"] == abort["verdict"]["n"] >= 5
    assert stopped["value"] == abort["verdict"]["value"] > 0.001
    assert stopped["interval"] == abort["verdict"]["interval"]
    assert verdict(verdicts, "no_errors@steady")["status"] == "no_data"
    assert verdicts["exit_code"] == 1

    manifest = read_json(run_dir / "manifest.json")
    assert manifest["ended"] == "aborted" and "ttft_p50_impossible" in manifest["reason"]
    assert manifest["profiles"]["steady"]["aborted_by_gate"] == "ttft_p50_impossible"
    assert manifest["profiles_not_run"] == ["night_trickle"]
    assert not (run_dir / "night_trickle").exists()
    profile = run_dir / "steady"
    for name in ("requests.jsonl", "load.json", "scrapes.jsonl", "gpu.jsonl", "steps.jsonl"):
        assert (profile / name).stat().st_size > 0, name
    load = read_json(profile / "load.json")
    assert load["ended"] == "interrupted"
    # The load itself stopped soon after the abort, not at the schedule's end. (Not the run's
    # wall time: server start and calibration take what the machine's speed makes them.)
    assert load["window"]["end"] - load["window"]["start"] < PROFILE_SECONDS / 2
    for name in ("junit.xml", "summary.md", "gates.yaml"):
        assert (run_dir / name).is_file(), name
    assert_no_strays(run_dir)

    check = subprocess.run(
        batchgate_argv("check", str(run_dir)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert check.returncode == 1, check.stderr
    assert read_json(run_dir / "verdicts.json")["verdicts"] == verdicts["verdicts"]
