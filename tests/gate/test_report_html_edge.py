"""report.html on damaged or thin run directories: every figure still has data or a reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest
from rundir_factory import make_run

from gate.outputs.html.report import write_report

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
            record.update(status="connection_error", first_token_at=None, chunk_times=[],
                          chunk_tokens=[], output_tokens=None, http_status=None,
                          error="connection refused")
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


@pytest.mark.parametrize("broken", ["verdicts", "load"])
def test_corrupt_files_do_not_raise_tracebacks(tmp_path: Path, broken: str) -> None:
    from gate.outputs.html.report import ReportError

    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    if broken == "verdicts":
        (run_dir / "verdicts.json").write_text(json.dumps({"schema_version": 99}))
        page = write_report(run_dir).read_text(encoding="utf-8")
        assert "verdicts.json is unreadable" in page
    else:
        (run_dir / "steady" / "load.json").write_text("{not json")
        with pytest.raises(ReportError, match=r"load\.json"):
            write_report(run_dir)


def test_step_figure_falls_back_to_the_scraped_histogram(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    (run_dir / "steady" / "steps.jsonl").unlink()
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert _states(page)["step"] == "data"
    assert "estimate from the step histogram" in page
