"""`batchgate report RUN_DIR`: re-evaluates or reads verdicts.json, prints, writes report.html,
and exits like `check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rundir_builder import GATES_YAML, make_run

from gate.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("cmd") / "run", profiles=("burst",))


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    path = tmp_path / "gates.yaml"
    path.write_text(GATES_YAML, encoding="utf-8")
    return path


def test_report_reevaluates_prints_and_writes_the_page(
    run_dir: Path, gates: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_dir / "report.html").unlink(missing_ok=True)
    code = main(["report", str(run_dir), "--gates", str(gates)])
    out = capsys.readouterr().out
    assert code == 1  # interactive_spike_ttft fails, as `check` would say
    assert "interactive_spike_ttft@burst" in out and "result: FAILED (exit 1)" in out
    assert "batchgate rollback --target http://127.0.0.1:8000 --to safe" in out
    assert f"report: {run_dir / 'report.html'}" in out
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "interactive_spike_ttft" in page
    saved = json.loads((run_dir / "verdicts.json").read_text(encoding="utf-8"))
    assert saved["exit_code"] == 1


def test_report_saved_reuses_verdicts_json(
    run_dir: Path, gates: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(run_dir), "--gates", str(gates)]) == 1
    capsys.readouterr()
    out_file = run_dir / "second.html"
    assert main(["report", str(run_dir), "--saved", "--out", str(out_file)]) == 1
    assert "interactive_spike_ttft" in out_file.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("make_args", "code", "message"),
    [
        (lambda d, g: ["report", str(d / "nope")], 2, "no such run directory"),
        (lambda d, g: ["report", str(d.parent)], 5, "no profile directories"),
        (lambda d, g: ["report", str(d), "--saved", "--gates", str(g)], 2, "exclude each other"),
    ],
)
def test_report_bad_input_is_a_message_and_an_exit_code(
    run_dir: Path, gates: Path, capsys: pytest.CaptureFixture[str], make_args, code, message
) -> None:
    assert main(make_args(run_dir, gates)) == code
    assert message in capsys.readouterr().err


def test_report_with_invalid_gates_file_exits_4(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ngates:\n  - name: x\n    metric: ttfx\n", encoding="utf-8")
    assert main(["report", str(run_dir), "--gates", str(bad)]) == 4
    assert "ttfx" in capsys.readouterr().err


def test_report_without_gates_or_verdicts_judges_with_the_packaged_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = make_run(tmp_path / "fresh", profiles=("steady",))
    monkeypatch.chdir(tmp_path)  # no ./gates.yaml here, and the run names none
    code = main(["report", str(fresh)])
    out = capsys.readouterr().out
    # The default gates are scoped to the default profiles: a `steady` run has none of their
    # data, which is "no data" (5) — judged, not a usage error.
    assert code == 5
    assert "trickle_ttft" in out and (fresh / "verdicts.json").is_file()


def test_report_out_naming_a_directory_leaves_no_temporary_page(
    run_dir: Path, gates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a-directory"
    out.mkdir()
    assert main(["report", str(run_dir), "--gates", str(gates), "--out", str(out)]) == 2
    assert f"cannot write {out}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory", "gates.yaml"]
