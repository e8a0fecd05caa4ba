"""`batchgate check` and `batchgate baseline` exit codes on run directories built in tmp_path."""

import json

import numpy as np
import pytest
from rundir_builder import request_records, write_gates, write_manifest, write_profile

from gate.cli import main

GATES = """\
version: 1
presets:
  safe: {policy: continuous, max_num_seqs: 16}
gates:
  - name: ttft_p99
    metric: ttft
    statistic: p99
    fail: "< 800ms"
    knob: interactive.max_wait_ms
    rollback: safe
"""


def _run_dir(tmp_path, ttft, n=1000, **kwargs):
    run = tmp_path / "run"
    write_profile(run, "steady", request_records(n, ttft_seconds=np.full(n, ttft)), **kwargs)
    write_manifest(run, ["steady"], ended=kwargs.pop("manifest_ended", "completed"))
    return run


@pytest.mark.parametrize(
    ("ttft", "n", "kwargs", "code"),
    [
        (0.1, 1000, {}, 0),
        (2.0, 1000, {}, 1),
        (0.1, 100, {}, 3),
        (0.1, 1000, {"measurement_valid": False}, 5),
    ],
    ids=["pass", "fail", "inconclusive", "invalid-measurement"],
)
def test_check_exit_codes(tmp_path, capsys, ttft, n, kwargs, code):
    run = _run_dir(tmp_path, ttft, n, **kwargs)
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    assert main(["check", str(run), "--gates", str(gates)]) == code
    written = json.loads((run / "verdicts.json").read_text())
    assert written["exit_code"] == code
    assert (run / "junit.xml").exists() and (run / "summary.md").exists()
    out = capsys.readouterr().out
    assert f"(exit {code})" in out


def test_check_prints_the_rollback_command_for_a_failure(tmp_path, capsys):
    run = _run_dir(tmp_path, 2.0)
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    assert main(["check", str(run), "--gates", str(gates), "--no-write"]) == 1
    out = capsys.readouterr().out
    assert "rollback: batchgate rollback --target http://127.0.0.1:8000 --to safe" in out
    assert not (run / "verdicts.json").exists()


def test_inconclusive_flag_overrides_the_policy(tmp_path):
    run = _run_dir(tmp_path, 0.1, 100)
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    assert (
        main(["check", str(run), "--gates", str(gates), "--inconclusive", "pass", "--no-write"])
        == 0
    )


def test_dead_target_exits_5(tmp_path):
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    run = _run_dir(tmp_path, 0.1)
    write_manifest(run, ["steady"], ended="target_died")
    assert main(["check", str(run), "--gates", str(gates), "--no-write"]) == 5


def test_a_missing_run_dir_is_the_same_usage_error_for_check_report_and_compare(tmp_path, capsys):
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    run = _run_dir(tmp_path, 0.1)
    missing = str(tmp_path / "nope")
    assert main(["check", missing, "--gates", str(gates)]) == 2
    assert "nope: no such run directory" in capsys.readouterr().err
    assert main(["report", missing]) == 2
    assert "nope: no such run directory" in capsys.readouterr().err
    assert main(["compare", missing, str(run)]) == 2
    assert "nope: no such run directory" in capsys.readouterr().err
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for argv in (["check", str(a_file), "--gates", str(gates)], ["report", str(a_file)]):
        assert main(argv) == 2
        assert "not a directory" in capsys.readouterr().err


def test_github_annotations_under_actions(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = _run_dir(tmp_path, 2.0)
    gates = write_gates(tmp_path / "gates.yaml", GATES)
    assert main(["check", str(run), "--gates", str(gates)]) == 1
    assert "::error title=gate ttft_p99@steady: fail::" in capsys.readouterr().out
    assert "## batchgate: FAILED (exit 1)" in summary.read_text()


def test_baseline_save_list_show_and_check_against_it(tmp_path, capsys):
    regression = "    baseline: {max_increase: 10%}\n"
    gates_text = GATES + "  - name: e2e_reg\n    metric: e2e\n    statistic: p90\n" + regression
    gates = write_gates(tmp_path / "gates.yaml", gates_text)
    store = tmp_path / "store"
    run = _run_dir(tmp_path, 0.1)
    assert (
        main(
            [
                "baseline",
                "--baseline-dir",
                str(store),
                "save",
                str(run),
                "--name",
                "main",
                "--gates",
                str(gates),
            ]
        )
        == 0
    )
    assert main(["baseline", "--baseline-dir", str(store), "list"]) == 0
    assert main(["baseline", "--baseline-dir", str(store), "show", "main"]) == 0
    out = capsys.readouterr().out
    assert "saved baseline 'main'" in out and '"name": "main"' in out
    args = [
        "check",
        str(run),
        "--gates",
        str(gates),
        "--baseline",
        "main",
        "--baseline-dir",
        str(store),
    ]
    assert main([*args, "--no-write"]) == 0
    assert main(["check", str(run), "--gates", str(gates), "--no-write"]) == 3  # no baseline given
    assert main([*args[:-2], "--baseline-dir", str(store), "--baseline", "nope"]) == 2
    assert main(["baseline", "--baseline-dir", str(store), "show", "nope"]) == 2


def test_outside_a_terminal_gate_names_are_never_cut(tmp_path, capsys):
    long_name = "ttft_p99_of_the_interactive_class_under_a_saturating_background_burst"
    gates = write_gates(tmp_path / "gates.yaml", GATES.replace("ttft_p99", long_name))
    run = _run_dir(tmp_path, 0.1)
    main(["check", str(run), "--gates", str(gates), "--no-write"])
    out = capsys.readouterr().out  # captured: not a terminal
    table = out.split("batchgate verdicts")[1].split("result:")[0]
    assert "…" not in table
    assert f"{long_name}@" in table  # 160 columns in a CI log: the whole name on one line
