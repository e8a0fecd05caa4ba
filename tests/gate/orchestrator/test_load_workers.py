"""`--workers N|auto`: the value a user gives (a clear usage error otherwise), the settings a
session runs with before and after the calibration, and the calibration's record of the count
its capacity step ran with (what `auto` hands to the profiles)."""

from __future__ import annotations

import os

import pytest

from gate.calibration.content import CalibrationError, parse_calibration
from gate.cli import main
from gate.orchestrator.load_workers import (
    AUTO,
    auto_ceiling,
    auto_entry,
    auto_workers,
    parse_workers,
)
from gate.orchestrator.session import SessionSettings


def test_the_value_is_a_whole_number_or_auto():
    assert parse_workers("auto") == AUTO and parse_workers(" 3 ") == 3 and parse_workers("1") == 1
    for bad, said in (("0", ">= 1 or auto, got 0"), ("-2", "got -2"), ("two", "got 'two'"),
                      ("1.5", "a whole number >= 1 or auto")):  # fmt: skip
        with pytest.raises(ValueError, match=said):
            parse_workers(bad)


@pytest.mark.parametrize("value", ["0", "lots"])
def test_a_bad_value_is_a_usage_error_of_the_command(value, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["run", "--workers", value])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "usage: batchgate run" in err and "--workers" in err and "auto" in err


def test_auto_without_a_calibration_is_refused_before_anything_starts(tmp_path, capsys):
    code = main(["run", "--workers", "auto", "--calibration", "off", "--out", str(tmp_path)])
    assert code == 2
    assert "--workers auto sizes the load generator in the calibration" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no run directory made


def test_the_ceiling_is_the_cpus_this_process_may_use():
    assert auto_ceiling() == len(os.sched_getaffinity(0))


def _calibration(workers: object) -> dict:
    phase = {"measurement_valid": True, "reasons": [], "client_cpu_ratio": None}
    if workers is not None:
        phase["workers"] = workers
    return {"schema_version": 1, "identity": {}, "spec": {}, "unloaded": {}, "capacity": {},
            "kv_capacity": None, "client": {"lone": dict(phase), "capacity": phase}}  # fmt: skip


def test_auto_runs_one_worker_until_the_calibration_then_its_capacity_count():
    base = SessionSettings(scale="smoke")
    before = auto_workers(base, None)
    assert before.load_workers == 1 and before.max_load_workers == auto_ceiling()
    after = auto_workers(base, parse_calibration(_calibration(2)))
    assert after.load_workers == 2 and after.max_load_workers == max(2, auto_ceiling())
    # A reused calibration that needed more workers than this machine's ceiling: it did.
    many = auto_workers(SessionSettings(scale="smoke", max_load_workers=2),
                        parse_calibration(_calibration(6)))  # fmt: skip
    assert (many.load_workers, many.max_load_workers) == (6, 6)
    # A calibration written before it recorded workers: one.
    assert auto_workers(base, parse_calibration(_calibration(None))).load_workers == 1
    assert auto_entry(after) == {"requested": "auto", "used": 2, "ceiling": after.max_load_workers}


def test_a_calibration_with_a_worker_count_of_the_wrong_type_is_refused():
    said = r"calibration.json: client\.lone\.workers: expected a whole number"
    with pytest.raises(CalibrationError, match=said):
        parse_calibration(_calibration("two"))
    assert parse_calibration(_calibration(3)).capacity_workers() == 3
    assert parse_calibration(_calibration(0)).capacity_workers() is None


def test_settings_refuse_a_ceiling_below_the_count():
    with pytest.raises(ValueError, match="max_load_workers"):
        SessionSettings(scale="smoke", load_workers=4, max_load_workers=2)
