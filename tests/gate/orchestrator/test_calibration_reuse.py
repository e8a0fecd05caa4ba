"""`--calibration auto` saves and reuses only a calibration whose client phases were valid
measurements: a saturated client's numbers, reused, would size or judge every later run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gate.calibration.content import (
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    CalibrationError,
    ClientPhase,
    parse_calibration,
)
from gate.calibration.json_io import read_calibration
from gate.calibration.procedure import CalibrationSpec
from gate.errors import ExitCode, UsageError
from gate.orchestrator import calibration_phase
from gate.orchestrator.calibration_phase import CalibrationPhase, identity_key

VALID = {"measurement_valid": True, "reasons": []}
SATURATED = {"measurement_valid": False, "reasons": ["client CPU peaked at 0.97 of a core"]}


@pytest.fixture(autouse=True)
def _no_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The answer-consistency probes (issue 39) follow the calibration on a live target; these
    # tests are about saving and reusing it.
    monkeypatch.setattr(calibration_phase, "answer_alone", lambda **_: None)


class _Info:
    has_step_records = False

    def to_manifest(self) -> dict[str, Any]:
        return {"server_kind": "openai", "model": "m", "url": "http://127.0.0.1:9"}


class _View:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def _document(capacity_client: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": CALIBRATION_SCHEMA_VERSION,
        "unloaded": {"short": {"e2e": {"p50": 0.1, "n": 20}}},
        "capacity": {"short": {"output_tokens_per_second": 1200.0, "rps": 10.0}},
        "client": {"lone": VALID, "capacity": capacity_client},
    }


def _calibration(capacity_client: dict[str, Any]) -> Calibration:
    return parse_calibration(_document(capacity_client))


def _phase(tmp_path: Path, measured: list[Calibration]) -> tuple[CalibrationPhase, _View]:
    """An `auto` phase whose measurements come from `measured`, one per call, in order."""
    view = _View()
    # No profile is relative, so no gates file is read.
    phase = CalibrationPhase(
        mode="auto", spec=CalibrationSpec(), store_dir=tmp_path / "store", run_dir=tmp_path,
        gates_file=None, preset=None, bundled=False, admin_token=None, scale="smoke",
        view=view,
    )  # type: ignore[arg-type]  # fmt: skip
    phase._measure = lambda *args: measured.pop(0)  # type: ignore[method-assign]
    return phase, view


def _run(phase: CalibrationPhase) -> Calibration:
    result = phase.run(
        plans=(), target=None, info=_Info(), server=None, settings=None,  # type: ignore[arg-type]
        children=[], hardware={"cpu": "x", "cpu_count": 2},
    )  # fmt: skip
    assert result is not None
    return result.calibration


def test_an_invalid_measurement_is_not_saved_and_the_next_run_measures_again(tmp_path):
    phase, view = _phase(tmp_path, [_calibration(SATURATED), _calibration(VALID)])
    first = _run(phase)
    assert first.source == "auto: measured"
    assert not list((tmp_path / "store").glob("*.json"))
    assert any("not saved for reuse" in line and "0.97 of a core" in line for line in view.lines)
    second = _run(phase)
    assert second.source == "auto: measured"
    assert second.client is not None
    assert second.client["capacity"] == ClientPhase(measurement_valid=True)
    assert len(list((tmp_path / "store").glob("*.json"))) == 1
    assert _run(phase).source == "auto: reused"


def test_an_invalid_calibration_saved_before_is_measured_afresh_and_replaced(tmp_path):
    phase, view = _phase(tmp_path, [_calibration(VALID)])
    key = identity_key(phase._identity(_Info(), {"cpu": "x", "cpu_count": 2}))  # type: ignore[arg-type]
    phase._save(key, _calibration(SATURATED))
    assert _run(phase).source == "auto: measured"
    assert any("saved calibration not reused" in line for line in view.lines)
    again = _run(phase)
    assert again.source == "auto: reused"
    assert again.as_written("client")["client"]["capacity"] == VALID


def test_a_calibration_without_a_client_record_is_saved_and_reused(tmp_path):
    # Hand-written, or from before `client` existed: read as it stands.
    plain = {k: v for k, v in _document(VALID).items() if k != "client"}
    phase, view = _phase(tmp_path, [parse_calibration(plain)])
    assert _run(phase).source == "auto: measured"
    assert _run(phase).source == "auto: reused"
    assert not [line for line in view.lines if "not saved" in line or "not reused" in line]


def test_a_profile_sized_by_an_invalid_phase_stops_the_run_naming_the_profile(tmp_path):
    phase, _ = _phase(tmp_path, [])
    plan = SimpleNamespace(
        name="burst", relative={"spike_rate_rps": "1.5x capacity"}, overrides={}, params={}
    )
    with pytest.raises(
        UsageError, match=r"profile 'burst': spike_rate_rps '1.5x capacity'.*"
    ) as info:
        phase._resolve([plan], _calibration(SATURATED))  # type: ignore[list-item]
    assert int(info.value.exit_code) == 5
    assert "0.97 of a core" in str(info.value)
    assert "--workers N" in str(info.value)  # what the user can do about it


def test_a_malformed_calibration_file_is_refused_naming_the_field(tmp_path):
    # `--calibration FILE`: a field of the wrong type is the file's fault (exit 2), named, and
    # gets no advice about workers.
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**_document(VALID), "client": "oops"}))
    with pytest.raises(CalibrationError, match="client: expected an object, got the text") as info:
        read_calibration(path)
    assert info.value.exit_code == ExitCode.USAGE
    assert str(info.value).startswith(str(path))
    assert "--workers" not in str(info.value)


def test_a_reused_calibration_is_written_into_the_run_byte_for_byte(tmp_path):
    # Reused from a file: the run directory gets the same document (unknown keys, order, numbers
    # as written), with `source` saying where it came from.
    document = {**_document(VALID), "extra": {"kept": [1, 2.50]}, "took_seconds": 1.0}
    given = tmp_path / "given.json"
    given.write_text(json.dumps(document, indent=2))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    phase = CalibrationPhase(
        mode=str(given), spec=CalibrationSpec(), store_dir=tmp_path / "store", run_dir=run_dir,
        gates_file=None, preset=None, bundled=False, admin_token=None, scale="smoke",
        view=_View(),
    )  # type: ignore[arg-type]  # fmt: skip
    result = _run(phase)
    written = (run_dir / "calibration.json").read_text()
    expected = {**document, "source": f"file: {given}"}
    assert written == json.dumps(expected, indent=2, allow_nan=False) + "\n"
    assert result.source == f"file: {given}"
