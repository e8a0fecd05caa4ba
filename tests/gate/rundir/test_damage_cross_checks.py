"""A damaged run never passes: every cross-check the run directory allows is made whenever its
inputs are there (records against load.json's counts_by_status, sent_requests and
planned_requests, and against requests.parquet's stamp), the affected profile's gates are no
data with the count in the reason, and the commands that show stored verdicts say they are
stale."""

from __future__ import annotations

import json

from rundir_builder import (
    load_json,
    request_records,
    write_gates,
    write_jsonl,
    write_manifest,
    write_profile,
)

from gate.cli import main
from gate.errors import ExitCode
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Status

GATES = """\
version: 1
gates:
  - name: no_errors
    metric: errors
    statistic: count
    fail: "== 0"
  - name: ttft_p50
    metric: ttft
    statistic: p50
    fail: "< 5s"
"""


def _run(tmp_path, n=386):
    records = request_records(n)
    write_profile(tmp_path, "burst", records)
    write_manifest(tmp_path, ["burst"])
    return tmp_path, records


def _edit_load(run_dir, **changes):
    path = run_dir / "burst" / "load.json"
    load = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            del load[key]
        else:
            load[key] = value
    path.write_text(json.dumps(load))


def _judge(run_dir):
    evaluation = evaluate(load_run(run_dir), loads(GATES, path="g.yaml"))
    return evaluation, {v.gate: v for v in evaluation.verdicts}


def test_the_issues_case_records_cut_and_counts_by_status_dropped_is_no_data(tmp_path):
    run, records = _run(tmp_path)
    write_jsonl(run / "burst" / "requests.jsonl", records[:100])
    _edit_load(run, counts_by_status=None)
    evaluation, verdicts = _judge(run)
    assert evaluation.exit_code is ExitCode.NO_DATA
    for verdict in verdicts.values():
        assert verdict.status is Status.NO_DATA
        assert "hold 100 sent requests, load.json says 386 were sent: records were lost" in (
            verdict.reason
        )


def test_records_whose_statuses_were_changed_are_no_data(tmp_path):
    run, _records = _run(tmp_path, n=50)
    _edit_load(run, counts_by_status={"ok": 40, "timeout": 10})
    _, verdicts = _judge(run)
    assert verdicts["no_errors"].status is Status.NO_DATA
    assert "hold 50 'ok' requests, load.json counted 40" in verdicts["no_errors"].reason


def test_more_records_than_were_planned_are_no_data(tmp_path):
    run, _ = _run(tmp_path, n=50)
    _edit_load(run, planned_requests=40, counts_by_status=None, sent_requests=None)
    _, verdicts = _judge(run)
    assert "load.json says 40 were planned: records of another load" in (
        verdicts["no_errors"].reason
    )


def test_a_load_json_without_counts_or_window_is_no_data(tmp_path):
    run, _ = _run(tmp_path, n=50)
    for key in ("window", "sent_requests", "planned_requests", "counts_by_status"):
        write_profile(run, "burst", request_records(50))
        _edit_load(run, **{key: None})
        _, verdicts = _judge(run)
        assert verdicts["no_errors"].status is Status.NO_DATA, key
        assert f"load.json has no {key!r}" in verdicts["no_errors"].reason


def test_a_manifest_without_ended_or_profiles_is_no_data(tmp_path):
    run, _ = _run(tmp_path, n=50)
    for key in ("ended", "profiles"):
        write_manifest(run, ["burst"])
        manifest = json.loads((run / "manifest.json").read_text())
        del manifest[key]
        (run / "manifest.json").write_text(json.dumps(manifest))
        evaluation, verdicts = _judge(run)
        assert evaluation.exit_code is ExitCode.NO_DATA, key
        assert f"manifest.json has no {key!r}" in verdicts["no_errors"].reason


def test_a_jsonl_cut_after_its_parquet_was_made_stays_no_data(tmp_path):
    run, records = _run(tmp_path, n=200)
    assert _judge(run)[0].exit_code is ExitCode.PASSED  # writes requests.parquet
    parquet = run / "burst" / "requests.parquet"
    assert parquet.exists()
    stamped = parquet.read_bytes()
    # Records cut from the JSONL and load.json made to agree: only the stamp still knows.
    write_jsonl(run / "burst" / "requests.jsonl", records[:120])
    (run / "burst" / "load.json").write_text(json.dumps(load_json("burst", records[:120])))
    for _ in range(2):  # the stamped file is kept as evidence: the second check sees it too
        evaluation, verdicts = _judge(run)
        assert evaluation.exit_code is ExitCode.NO_DATA
        assert "shorter than the" in verdicts["no_errors"].reason
        assert "requests.parquet (200 records) was made from: records were cut" in (
            verdicts["no_errors"].reason
        )
    assert parquet.read_bytes() == stamped


def test_a_jsonl_that_grew_after_its_parquet_is_read_and_judged(tmp_path):
    run, _records = _run(tmp_path, n=100)
    _judge(run)
    more = request_records(150)
    write_jsonl(run / "burst" / "requests.jsonl", more)
    (run / "burst" / "load.json").write_text(json.dumps(load_json("burst", more)))
    evaluation, verdicts = _judge(run)
    assert evaluation.exit_code is ExitCode.PASSED
    assert verdicts["no_errors"].n == 150


def test_check_report_saved_and_compare_on_a_damaged_run(tmp_path, capsys):
    run, records = _run(tmp_path / "run")
    write_gates(run / "gates.yaml", GATES)
    assert main(["check", str(run)]) == 0  # verdicts.json of the whole run
    reference = tmp_path / "reference"
    write_profile(reference, "burst", records)
    write_manifest(reference, ["burst"])
    write_gates(reference / "gates.yaml", GATES)
    assert main(["check", str(reference)]) == 0
    write_jsonl(run / "burst" / "requests.jsonl", records[:100])
    _edit_load(run, counts_by_status=None)
    capsys.readouterr()

    assert main(["report", "--saved", str(run), "--out", str(tmp_path / "r.html")]) == 5
    out = " ".join(capsys.readouterr().out.split())  # the note wraps at the console's width
    # The first finding is requests.parquet's stamp (made by the first check): 386 records.
    assert "its verdicts are stale" in out and "(386 records) was made from" in out

    assert main(["compare", str(reference), str(run), "--json"]) == 5  # compared, with notes
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("run B:" in n and "its verdicts are stale" in n for n in notes)
    assert any(n.startswith("run B is damaged (burst: requests.jsonl is ") for n in notes)

    assert main(["check", "--no-write", str(run)]) == 5


def test_a_run_is_judged_with_its_own_gates_even_when_the_manifest_lost_gates_file(
    tmp_path, monkeypatch
):
    run, _ = _run(tmp_path / "run", n=50)
    write_gates(run / "gates.yaml", GATES.replace('"< 5s"', '"< 1ns"'))  # its own gates fail
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["gates_file"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    write_gates(tmp_path / "gates.yaml", GATES)  # a passing gates file in the working directory
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-write", str(run)]) == 1
