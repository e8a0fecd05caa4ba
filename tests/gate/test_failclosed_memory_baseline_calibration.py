"""Fail closed where data does not support a gate: host memory on a GPU target, a baseline
saved from an invalid run, a relative threshold against an invalid or malformed calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rundir_builder import WALL0, request_records, write_gates, write_manifest, write_profile

from gate.baseline import BaselineStore, InvalidBaselineRun
from gate.cli import main
from gate.errors import ExitCode
from gate.gates.file import loads
from gate.gates.spec import Scope
from gate.metrics.derive import measure
from gate.metrics.measurements import Series
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate

MEMORY_GATE = """\
version: 1
gates:
  - name: mem
    metric: memory_used
    statistic: peak
    fail: "< 20GiB"
"""


def _judge(run_dir, gates_text):
    evaluation = evaluate(load_run(run_dir), loads(gates_text, path="g.yaml"))
    (verdict,) = evaluation.verdicts
    return verdict, int(evaluation.exit_code)


def _scrape(t, **metrics):
    return {"t": WALL0 + t, "phase": "poll", "ok": True, "error": None, "metrics": metrics}


def _memory_run(tmp_path, *, hardware_gpu=None, gpu=None, scrapes=None):
    if scrapes is None:
        scrapes = [_scrape(t, process_resident_memory_bytes=1e9) for t in (0.0, 0.5, 1.0)]
    write_profile(tmp_path, "steady", request_records(300), scrapes=scrapes, gpu=gpu)
    write_manifest(tmp_path, ["steady"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["hardware"]["gpu"] = hardware_gpu
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


# --- 1. host memory never stands in for device memory -------------------------------------


def test_server_rss_on_a_gpu_target_without_gpu_jsonl_is_no_data(tmp_path):
    run = _memory_run(tmp_path, hardware_gpu="NVIDIA H100 80GB")
    verdict, code = _judge(run, MEMORY_GATE)
    assert verdict.status.value == "no_data" and code == ExitCode.NO_DATA
    assert "no gpu.jsonl" in verdict.reason and "NVIDIA H100 80GB" in verdict.reason
    gates = write_gates(tmp_path / "gates.yaml", MEMORY_GATE)
    assert main(["check", str(run), "--gates", str(gates), "--no-write"]) == 5


def test_process_rss_samples_on_a_gpu_target_are_no_data(tmp_path):
    rss = [
        {"t": WALL0 + 0.1 * i, "source": "process_rss", "memory_used_bytes": 1e9, "note": "x"}
        for i in range(5)
    ]
    verdict, code = _judge(_memory_run(tmp_path, hardware_gpu="NVIDIA A10", gpu=rss), MEMORY_GATE)
    assert verdict.status.value == "no_data" and code == ExitCode.NO_DATA
    assert "process_rss" in verdict.reason and "gpu.jsonl" in verdict.reason


def test_a_target_reporting_device_memory_is_a_gpu_target(tmp_path):
    # A remote bundled server on a GPU, measured from a machine without one.
    scrapes = [
        _scrape(t, process_resident_memory_bytes=1e9, device_memory_used_bytes=5e9)
        for t in (0.0, 0.5, 1.0)
    ]
    verdict, _ = _judge(_memory_run(tmp_path, scrapes=scrapes), MEMORY_GATE)
    assert verdict.status.value == "no_data" and "device_memory_used_bytes" in verdict.reason


def test_a_cpu_target_keeps_the_resident_memory_fallback(tmp_path):
    scrapes = [
        _scrape(t, process_resident_memory_bytes=1e9, device_memory_used_bytes=0)
        for t in (0.0, 0.5, 1.0)
    ]
    verdict, code = _judge(_memory_run(tmp_path, scrapes=scrapes), MEMORY_GATE)
    assert verdict.status.value == "pass" and code == ExitCode.PASSED


def test_nvml_samples_on_a_gpu_target_are_judged(tmp_path):
    nvml = [
        {"t": WALL0 + 0.1 * i, "source": "nvml", "device": 0, "memory_used_bytes": 3e10,
         "memory_total_bytes": 8e10}
        for i in range(5)
    ]  # fmt: skip
    run = _memory_run(tmp_path, hardware_gpu="NVIDIA H100 80GB", gpu=nvml)
    verdict, code = _judge(run, MEMORY_GATE)
    assert verdict.status.value == "fail" and code == ExitCode.FAILED
    profile = load_run(run).profiles["steady"]
    got = measure(profile, "memory_used", "peak", Scope(), slos=None, settings=None,
                  warmup_seconds=0.0)  # fmt: skip
    assert isinstance(got, Series) and got.note is None


# --- 2. a baseline is a valid measurement ------------------------------------------------

REGRESSION = """\
version: 1
gates:
  - name: ttft_reg
    metric: ttft
    statistic: p90
    baseline: {max_increase: 10%, floor: 5ms}
"""


def _latency_run(path, ttft, *, ended="completed", **load):
    records = request_records(300, ttft_seconds=np.full(300, ttft))
    write_profile(path, "steady", records, **load)
    write_manifest(path, ["steady"], ended=ended)
    return path


def test_baseline_save_refuses_a_run_whose_target_died(tmp_path, capsys):
    # The auditor's case: the target died, load.json says interrupted and invalid.
    bad = tmp_path / "bad"
    write_profile(bad, "steady", request_records(300, ttft_seconds=np.full(300, 3.0)),
                  measurement_valid=False, ended="interrupted")  # fmt: skip
    write_manifest(bad, ["steady"], ended="target_died")
    gates = write_gates(tmp_path / "gates.yaml", REGRESSION)
    store = tmp_path / "store"
    save = ["baseline", "--baseline-dir", str(store), "save", str(bad), "--name", "main"]
    assert main([*save, "--gates", str(gates)]) == 5
    err = capsys.readouterr().err
    assert "not a valid measurement" in err and "target_died" in err
    assert not (store / "main.json").exists()
    # Nothing to regress against: the slow run cannot pass against the dead one.
    slow = _latency_run(tmp_path / "slow", 2.5)
    check = ["check", str(slow), "--gates", str(gates), "--no-write"]
    assert main([*check, "--baseline", "main", "--baseline-dir", str(store)]) != 0


def test_baseline_save_refuses_an_invalid_profile_of_a_completed_run(tmp_path):
    run = load_run(_latency_run(tmp_path / "r", 0.1, measurement_valid=False))
    with pytest.raises(InvalidBaselineRun, match="measurement invalid") as caught:
        BaselineStore(tmp_path / "store").save(run, "main")
    assert caught.value.exit_code == ExitCode.NO_DATA
    assert BaselineStore(tmp_path / "store").list() == []


def test_baseline_save_of_a_valid_run_stores_no_value_for_no_data(tmp_path):
    run = load_run(_latency_run(tmp_path / "r", 0.1))
    baseline = BaselineStore(tmp_path / "store").save(run, "main", gates_file=loads(MEMORY_GATE))
    assert any(k.startswith("steady|ttft|p90|") for k in baseline.measures)
    assert not any("|memory_used|" in k for k in baseline.measures)  # no gpu.jsonl: no figure


# --- 3. a relative threshold needs a valid, well-formed calibration ------------------------

RELATIVE = """\
version: 1
gates:
  - name: ttft_rel
    metric: ttft
    statistic: p75
    fail: "< 4x unloaded"
"""

CAPACITY = """\
version: 1
gates:
  - name: rate_rel
    metric: achieved_rate
    fail: "> 0.1x capacity"
"""


def _calibrated_run(tmp_path, unloaded, *, lone_valid=True, capacity=None, client=None):
    write_profile(tmp_path, "steady", request_records(200, ttft_seconds=np.full(200, 3.0)))
    write_manifest(tmp_path, ["steady"])
    if client is None:
        client = {
            "lone": {"measurement_valid": lone_valid, "reasons": [] if lone_valid else ["CPU"]},
            "capacity": {"measurement_valid": True, "reasons": []},
        }
    calibration = {
        "schema_version": 1,
        "unloaded": {"short": {"ttft": unloaded}},
        "capacity": capacity or {"short": {"rps": 10.0, "output_tokens_per_second": 100.0}},
        "client": client,
    }
    (tmp_path / "calibration.json").write_text(json.dumps(calibration))
    return tmp_path


def test_a_calibration_whose_lone_phase_was_invalid_is_no_reference(tmp_path):
    run = _calibrated_run(tmp_path, {"p50": 1.0, "p90": 1.2, "n": 1}, lone_valid=False)
    verdict, code = _judge(run, RELATIVE)
    assert verdict.status.value == "no_data" and code == ExitCode.NO_DATA
    assert "lone phase was not a valid measurement" in verdict.reason and "CPU" in verdict.reason


def test_an_invalid_capacity_phase_leaves_unloaded_gates_judged(tmp_path):
    client = {
        "lone": {"measurement_valid": True},
        "capacity": {"measurement_valid": False, "reasons": ["client CPU 0.99 > 0.9"]},
    }
    run = _calibrated_run(tmp_path, {"p50": 1.0, "n": 12}, client=client)
    assert _judge(run, CAPACITY)[0].status.value == "no_data"
    assert _judge(run, RELATIVE)[0].status.value == "pass"  # 3 s < 4 x 1 s


@pytest.mark.parametrize(
    "unloaded",
    [0.05, [0.05], "0.05", {"p50": "1"}, {"p50": 0}, {"p50": -1.0}, {"p50": True},
     {"p90": 1.0}, {"p50": 1.0, "n": 0}, {"p50": 1.0, "n": "many"}],
)  # fmt: skip
def test_a_malformed_unloaded_value_is_no_data_never_a_traceback(tmp_path, unloaded):
    verdict, code = _judge(_calibrated_run(tmp_path, unloaded), RELATIVE)
    assert verdict.status.value == "no_data" and code == ExitCode.NO_DATA
    assert "calibration.json" in verdict.reason


@pytest.mark.parametrize(
    ("capacity", "client"),
    [({"short": 5}, None), ({"short": {"rps": "fast"}}, None), ([1], None),
     (None, "valid"), (None, {"capacity": [True]})],
)  # fmt: skip
def test_malformed_capacity_or_client_records_are_no_data(tmp_path, capacity, client):
    run = _calibrated_run(tmp_path, {"p50": 1.0}, capacity=capacity, client=client)
    verdict, code = _judge(run, CAPACITY)
    assert verdict.status.value == "no_data" and code == ExitCode.NO_DATA
    assert "calibration.json" in verdict.reason


def test_k2_through_the_cli_exits_5_not_1(tmp_path, capsys):
    run = _calibrated_run(tmp_path, 0.05)
    gates = write_gates(tmp_path / "gates.yaml", RELATIVE)
    assert main(["check", str(run), "--gates", str(gates), "--no-write"]) == 5
    assert "Traceback" not in capsys.readouterr().err
