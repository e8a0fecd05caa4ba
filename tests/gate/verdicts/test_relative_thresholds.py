"""`fail: "< 4x unloaded"`: parsed, resolved against calibration.json, never judged without it."""

from __future__ import annotations

import numpy as np
import pytest
from rundir_builder import request_records, write_profile

from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.units import UnitError, UnitKind, parse_threshold
from gate.verdicts.evaluate import evaluate

GATES = """\
version: 1
gates:
  - name: lone_ttft
    metric: ttft
    statistic: p50
    fail: "< 4x unloaded"
"""


def test_the_relative_form_keeps_its_factor_and_reference():
    threshold = parse_threshold("< 4x unloaded", kind=UnitKind.DURATION)
    assert (threshold.op, threshold.value, threshold.reference) == ("<", 4.0, "unloaded")


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("< 4x idle", UnitKind.DURATION, "unknown reference 'idle'"),
        ("< 4x unloaded", UnitKind.RATIO, "fits only time metrics"),
        ("< 0x unloaded", UnitKind.DURATION, "positive"),
        ("< 4x capacity", UnitKind.DURATION, "fits only rate metrics"),
        ("> 0.3x unloaded", UnitKind.RATE, "fits only time metrics"),
        ("> -1x capacity", UnitKind.RATE, "cannot read"),
    ],
)
def test_bad_relative_thresholds_are_errors_with_a_fix(text, kind, message):
    with pytest.raises(UnitError, match=message):
        parse_threshold(text, kind=kind)


def _run(tmp_path, ttft_seconds, calibration):
    write_profile(tmp_path, "steady", request_records(40, ttft_seconds=np.full(40, ttft_seconds)))
    if calibration is not None:
        (tmp_path / "calibration.json").write_text(calibration)
    return load_run(tmp_path)


CAL = '{"schema_version": 1, "unloaded": {"short": {"ttft": {"p50": 0.05}}}}'


def test_the_threshold_is_the_factor_times_the_unloaded_median(tmp_path):
    passing = evaluate(_run(tmp_path / "a", 0.1, CAL), loads(GATES, path="g.yaml"))
    (verdict,) = passing.verdicts
    assert verdict.status.value == "pass"
    assert verdict.threshold_value == pytest.approx(0.2)
    assert "4x unloaded = 200" in verdict.threshold
    failing = evaluate(_run(tmp_path / "b", 0.3, CAL), loads(GATES, path="g.yaml"))
    assert failing.verdicts[0].status.value == "fail"


def test_without_a_calibration_the_gate_is_no_data_and_never_passes(tmp_path):
    evaluation = evaluate(_run(tmp_path, 0.001, None), loads(GATES, path="g.yaml"))
    (verdict,) = evaluation.verdicts
    assert verdict.status.value == "no_data"
    assert "calibration.json" in verdict.reason
    assert int(evaluation.exit_code) == 5


def test_the_capacity_form_keeps_its_factor_and_reference():
    threshold = parse_threshold("> 0.25x capacity", kind=UnitKind.RATE)
    assert (threshold.op, threshold.value, threshold.reference) == (">", 0.25, "capacity")
