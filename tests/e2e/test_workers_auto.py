"""`--workers auto` with real processes: the calibration's capacity sweep measures a step whose
load generator saturated again with twice the Locust workers, up to the ceiling, and fails
closed there; a run's profiles then use the worker count its calibration's capacity step ran.

Saturation is made certain, whatever the machine's speed: the calibration's client CPU limit is
set to a millionth of a core, which any running load generator exceeds, so every phase is an
invalid measurement and the widening is exercised step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_support import fake_openai_server

from gate.calibration.procedure import CalibrationSpec
from gate.gates.file import load
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import ProfilePlan, resolve_plans
from gate.orchestrator.run_config import RunConfig
from gate.orchestrator.runner import execute
from gate.orchestrator.session import SessionSettings

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, url: str, **changes: object) -> RunConfig:
    gates = tmp_path / "gates.yaml"
    gates.write_text("version: 1\ngates: []\n", encoding="utf-8")
    base = {
        "gates_file": load(gates),
        "gates_text": gates.read_text(encoding="utf-8"),
        "plans": (ProfilePlan(name="calibration", overrides={}),),
        "scale": "smoke",
        "run_dir": tmp_path / "calibrate",
        "target_url": url,
        "load_workers": "auto",
        # The ceiling is two workers whatever this machine's CPUs (auto's own is one per CPU).
        "session": SessionSettings(scale="smoke", max_load_workers=2),
        "calibration_store": tmp_path / "store",
        "write_report": False,
    }
    return RunConfig(**{**base, **changes})  # type: ignore[arg-type]


def test_auto_doubles_the_workers_of_a_saturated_step_then_profiles_run_with_them(tmp_path):
    spec = CalibrationSpec(
        lone_seconds=1.0,
        min_lone_requests=1,
        capacity_start_users=4,
        capacity_seconds=1.5,
        capacity_e2e_multiple=1.0,
        capacity_requests_per_user=1.0,
        max_client_cpu_ratio=1e-6,  # every phase saturated: see the module's docstring
    )
    with fake_openai_server(tmp_path, "--ttft-ms", "5", "--itl-ms", "2") as url:
        config = _config(tmp_path, url, calibration_spec=spec, calibrate_only=True)
        execute(config, LiveView())
        data = json.loads((tmp_path / "calibrate" / "calibration.json").read_text())
        sweep = data["capacity_sweep"]
        steps = [(s["phase"], s["workers"], s["client_valid"]) for s in sweep["curve"]]
        # One worker saturated at 4 users: the same 4 users again with 2; still saturated at
        # the ceiling: the sweep stops there, failing closed, and says how many workers ran.
        assert steps == [("capacity-4", 1, False), ("capacity-4-w2", 2, False)], steps
        assert sweep["stop"] == "client saturated" and sweep["saturated"] is False
        assert "saturated at 4 users with 2 workers" in sweep["detail"]
        again = tmp_path / "calibrate" / "calibration" / "capacity-4-w2" / "steady" / "load.json"
        assert json.loads(again.read_text())["workers"] == 2  # two Locust workers really ran
        assert data["client"]["capacity"]["workers"] == 2
        assert data["client"]["lone"]["workers"] == 1  # the lone phase: one user, one worker

        # A run given that calibration: its profiles run with the capacity step's count.
        gates = load(tmp_path / "gates.yaml")
        plans = resolve_plans(
            ["steady"], gates, scale="smoke",
            extra_overrides={"steady": {"rate_rps": 4, "duration_seconds": 2}},
        )  # fmt: skip
        run = _config(
            tmp_path, url, plans=tuple(plans), run_dir=tmp_path / "run",
            calibration=str(tmp_path / "calibrate" / "calibration.json"),
        )  # fmt: skip
        result = execute(run, LiveView())
    assert result.fault is None  # (no gates to judge: its exit code says "no data")
    load_json = json.loads((tmp_path / "run" / "steady" / "load.json").read_text())
    assert load_json["workers"] == 2 and load_json["sent_requests"] > 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["load_workers"] == {"requested": "auto", "used": 2, "ceiling": 2}
