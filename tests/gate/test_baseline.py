import json

import numpy as np
import pytest
from rundir_builder import request_records, write_manifest, write_profile

from gate.baseline import BaselineError, BaselineStore
from gate.errors import ExitCode
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Status

GATES = loads(
    "version: 1\ngates:\n  - name: e2e_reg\n    metric: e2e\n    statistic: p90\n"
    "    baseline: {max_increase: 10%, floor: 5ms}\n",
    path="g.yaml",
)


def _run(path, ttft, *, model="tiny"):
    write_profile(path, "steady", request_records(2000, ttft_seconds=np.full(2000, ttft)))
    write_manifest(path, ["steady"], model=model)
    return load_run(path)


def test_save_list_show_load_round_trip_with_provenance(tmp_path):
    store = BaselineStore(tmp_path / "store")
    saved = store.save(_run(tmp_path / "a", 0.1), "main", gates_file=GATES)
    assert store.list() == ["main"]
    shown = store.show("main")
    assert shown["provenance"]["steady"]["model"] == "tiny"
    assert shown["provenance"]["steady"]["profile_hash"] == "pppppppp"
    assert store.load("main").measures == saved.measures
    assert any(key.startswith("steady|e2e|p90|") for key in saved.measures)
    json.dumps(shown)  # plain JSON all the way down


def test_saving_twice_needs_overwrite_and_unknown_names_are_errors(tmp_path):
    store = BaselineStore(tmp_path / "store")
    run = _run(tmp_path / "a", 0.1)
    store.save(run, "main")
    with pytest.raises(BaselineError, match="exists"):
        store.save(run, "main")
    store.save(run, "main", overwrite=True)
    with pytest.raises(BaselineError, match="no baseline 'other'"):
        store.load("other")
    with pytest.raises(BaselineError, match="names use"):
        store.load("../escape")


def test_default_store_is_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert BaselineStore().root == tmp_path / ".batchgate" / "baselines"


def test_regression_gate_fails_on_a_real_regression_and_passes_within_limits(tmp_path):
    store = BaselineStore(tmp_path / "store")
    baseline = store.save(_run(tmp_path / "a", 0.1, model="tiny"), "main", gates_file=GATES)
    slower = evaluate(_run(tmp_path / "b", 0.3), GATES, baseline=baseline)
    same = evaluate(_run(tmp_path / "c", 0.1), GATES, baseline=baseline)
    assert slower.verdicts[0].status is Status.FAIL and slower.exit_code is ExitCode.FAILED
    # e2e = ttft + 7 gaps of 20 ms + 1 ms
    assert slower.verdicts[0].baseline_delta_ratio == pytest.approx(0.2 / 0.241, rel=1e-6)
    assert same.verdicts[0].status is Status.PASS


def test_provenance_mismatch_is_inconclusive_never_a_silent_pass(tmp_path):
    store = BaselineStore(tmp_path / "store")
    baseline = store.save(_run(tmp_path / "a", 0.1, model="tiny"), "main", gates_file=GATES)
    other = evaluate(_run(tmp_path / "b", 0.1, model="llama-8b"), GATES, baseline=baseline)
    verdict = other.verdicts[0]
    assert verdict.status is Status.INCONCLUSIVE
    assert "model differs (baseline tiny, run llama-8b)" in verdict.reason
    assert other.exit_code is ExitCode.INCONCLUSIVE
