"""`batchgate calibrate` measures the bundled server alone, and `--calibration auto` reuses a
saved calibration of the same target, settings and hardware instead of measuring again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e_support import RUN_TIMEOUT_SECONDS

from gate.calibration.procedure import CalibrationSpec
from gate.gates.file import load
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import ProfilePlan
from gate.orchestrator.run_config import RunConfig
from gate.orchestrator.runner import execute

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
    # The bundled server states max_num_seqs 64: the sweep stops there at the latest.
    sweep = data["capacity_sweep"]
    assert sweep["curve"][0]["users"] == 16 and capacity["users"] <= 64
    assert sweep["stop"] in ("plateau", "limit") and sweep["limit"]["users"] == 64
    assert capacity["n"] > capacity["users"]
    assert data["kv_capacity"] == {"tokens": 4096 * 16, "source": "batchgate_kv_capacity_tokens"}
    assert data["source"] == "auto: measured"
    # Only a valid measurement is saved for reuse (a saturated client's would be refused).
    assert all(phase["measurement_valid"] for phase in data["client"].values()), data["client"]
    assert f"capacity ({capacity['users']} closed-loop users)" in first.stdout
    stored = list((tmp_path / ".batchgate" / "calibrations").glob("*.json"))
    assert len(stored) == 1

    second = _calibrate(tmp_path, "b")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    again = json.loads((tmp_path / "runs" / "calibrate-b" / "calibration.json").read_text())
    assert again["source"] == "auto: reused"
    assert again["unloaded"] == data["unloaded"] and again["capacity"] == data["capacity"]
    # Nothing measured again (the answer-consistency probes, issue 39, run alone every time).
    phases = tmp_path / "runs" / "calibrate-b" / "calibration"
    assert not [p.name for p in phases.glob("*") if p.name != "probes"]


CAPACITY_TARGET = (
    Path(__file__).resolve().parents[1] / "gate" / "orchestrator" / "capacity_target.py"
)
SLOTS, ITL_SECONDS = 400, 0.15  # the fake's truth: 400 streams x 1 token / 150 ms


@pytest.fixture
def capacity_target(tmp_path: Path):  # type: ignore[no-untyped-def]
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            *(sys.executable, str(CAPACITY_TARGET), "--port-file", str(port_file)),
            *("--slots", str(SLOTS), "--itl-ms", str(ITL_SECONDS * 1000)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, "fake target did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port_file.read_text().strip()}"
    proc.terminate()
    proc.wait(timeout=10)


def test_the_sweep_finds_a_capacity_far_above_64_streams(tmp_path, capacity_target):
    """A target running 400 streams at a fixed per-stream rate states no limit: the sweep
    doubles past 64 until the plateau, and its capacity lies within 10% of the truth, where
    the old fixed 64-user probe (the curve's 64-user step) saw 16% of it."""
    # Shorter phases than the defaults (the fake answers in ~2 s, so the default 10 E2Es a step
    # and 12 lone samples would take minutes); the sweep's rule is the default one.
    spec = CalibrationSpec(
        lone_seconds=2.0,
        min_lone_requests=3,
        capacity_seconds=2.0,
        capacity_e2e_multiple=4.0,
        capacity_requests_per_user=2.0,
    )
    assert (spec.capacity_start_users, spec.capacity_growth, spec.plateau_share) == (16, 2, 0.1)
    # A gates file of its own: the calibration reads none of it, and the test stays about the
    # sweep whatever the packaged default holds.
    gates = tmp_path / "gates.yaml"
    gates.write_text("version: 1\ngates: []\n", encoding="utf-8")
    config = RunConfig(
        gates_file=load(gates),
        gates_text=gates.read_text(encoding="utf-8"),
        plans=(ProfilePlan(name="calibration", overrides={}),),
        scale="smoke",
        run_dir=tmp_path / "run",
        target_url=capacity_target,
        calibration="fresh",
        calibration_spec=spec,
        calibration_store=tmp_path / "store",
        calibrate_only=True,
        write_report=False,
    )
    result = execute(config, LiveView())
    assert int(result.exit_code) == 0, result.fault
    data = json.loads((tmp_path / "run" / "calibration.json").read_text())
    truth = SLOTS / ITL_SECONDS
    sweep = data["capacity_sweep"]
    curve = {step["users"]: step for step in sweep["curve"]}
    print("capacity sweep:", {u: round(s["output_tokens_per_second"]) for u, s in curve.items()})
    print("truth", truth, "new", data["capacity"]["short"]["output_tokens_per_second"])
    assert sweep["stop"] == "plateau" and sweep["saturated"] is True, sweep["detail"]
    assert all(step["client_valid"] for step in sweep["curve"]), sweep["curve"]
    measured = data["capacity"]["short"]["output_tokens_per_second"]
    assert abs(measured - truth) <= 0.10 * truth, (measured, truth)
    assert data["capacity"]["short"]["users"] > 400
    # The old probe: 64 closed-loop users, the same estimator.
    assert curve[64]["output_tokens_per_second"] <= 0.17 * truth, curve[64]
