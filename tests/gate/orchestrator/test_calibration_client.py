"""calibration.json's `client` record of a phase: the phase load's own validity and reasons,
read from its load.json (a reference gate refuses an invalid phase, docs/calibration.md)."""

from __future__ import annotations

from rundir_builder import request_records, write_profile

from gate.orchestrator.calibration import _PROFILE, _client
from gate.rundir.run import load_run


def test_an_invalid_phase_keeps_the_load_generators_reasons(tmp_path):
    write_profile(tmp_path, _PROFILE, request_records(20), measurement_valid=False)
    record = _client(load_run(tmp_path))
    assert record["measurement_valid"] is False
    assert record["reasons"] == ["schedule lag p99 0.2s > 0.05s"]  # load.json's invalid_reasons
    write_profile(tmp_path, _PROFILE, request_records(20))
    assert _client(load_run(tmp_path)) == {
        "measurement_valid": True, "reasons": [], "client_cpu_ratio": {"mean": 0.1, "max": 0.2},
        "workers": 1,  # load.json's: what --workers auto runs the profiles with
    }  # fmt: skip
