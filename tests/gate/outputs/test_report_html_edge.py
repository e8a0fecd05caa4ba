"""report.html on damaged or thin run directories: every figure still has data or a reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest
from rundir_builder import make_run

from gate.cli import main
from gate.errors import ExitCode
from gate.outputs.html.report import ReportError, write_report
from gate.rundir.run import RunDirError, load_run

_STATE_RE = re.compile(r'data-figure="([^"]+)" data-state="([^"]+)"')
_NODATA_RE = re.compile(r'<div class="nodata">no data: ([^<]+)</div>')


def _states(page: str) -> dict[str, str]:
    return dict(_STATE_RE.findall(page))


def _rewrite_requests(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in change(records)))


def test_empty_requests_file_gives_reasons_not_errors(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    (run_dir / "steady" / "requests.jsonl").write_bytes(b"")
    page = write_report(run_dir).read_text(encoding="utf-8")
    states = _states(page)
    assert len(states) == 9
    for key in ("ttft-cdf", "itl-cdf", "e2e-cdf", "rate", "rolling-ttft"):
        assert states[key] == "no-data", key
    assert states["kv"] == "data"  # the observers still saw the server
    assert len(_NODATA_RE.findall(page)) == 5


def test_all_requests_failed_shows_rates_and_says_why_latency_is_missing(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))

    def fail_all(records):  # type: ignore[no-untyped-def]
        for record in records:
            record.update(
                status="connection_error",
                first_token_at=None,
                chunk_times=[],
                chunk_tokens=[],
                output_tokens=None,
                http_status=None,
                error="connection refused",
            )
        return records

    _rewrite_requests(run_dir / "steady" / "requests.jsonl", fail_all)
    page = write_report(run_dir).read_text(encoding="utf-8")
    states = _states(page)
    assert states["rate"] == "data"
    assert states["ttft-cdf"] == states["e2e-cdf"] == states["rolling-ttft"] == "no-data"


def test_missing_load_json_and_manifest_still_render(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("burst",))
    (run_dir / "burst" / "load.json").unlink()
    (run_dir / "manifest.json").unlink()
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "no data: load.json missing" in page
    assert "manifest.json missing, provenance unknown" in page
    states = _states(page)
    assert states["ttft-cdf"] == "data"  # the window comes from the records themselves
    # Without load.json's clock anchor observer records cannot be placed on the time axis.
    assert states["kv"] == "no-data"


def test_partial_last_line_is_reported_as_a_note(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    with (run_dir / "steady" / "requests.jsonl").open("ab") as handle:
        handle.write(b'{"id": "cut-off", "planned_')
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "requests.jsonl: skipped a partial last line" in page
    assert set(_states(page).values()) == {"data"}


def test_corrupt_verdicts_json_is_said_on_the_page_not_raised(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    (run_dir / "verdicts.json").write_text(json.dumps({"schema_version": 99}))
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "verdicts.json is unreadable" in page
    assert set(_states(page).values()) == {"data"}  # the figures do not depend on verdicts


def test_corrupt_load_json_is_an_error_naming_the_file_and_a_message_with_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    corrupt = run_dir / "steady" / "load.json"
    corrupt.write_text("{not json")
    with pytest.raises(RunDirError, match=re.escape(f"{corrupt}: not readable JSON")):
        load_run(run_dir)
    with pytest.raises(ReportError, match=re.escape(f"{corrupt}: not readable JSON")):
        write_report(run_dir)
    # The command says the same in one line on stderr and exits 5 (no data), no traceback.
    assert main(["report", str(run_dir)]) == ExitCode.NO_DATA
    err = capsys.readouterr().err
    assert f"batchgate report: not a readable run: {corrupt}: not readable JSON" in err
    assert "Traceback" not in err
    assert not (run_dir / "report.html").exists()


def test_step_figure_falls_back_to_the_scraped_histogram(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    (run_dir / "steady" / "steps.jsonl").unlink()
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert _states(page)["step"] == "data"
    assert "estimate from the step histogram" in page
