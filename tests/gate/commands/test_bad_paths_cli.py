"""Paths and saved files a user got wrong: a moved or copied run's gates, verdicts.json and
baselines of the wrong shape, --out naming a file, a --run-id that leaves --out, a sampler told
to write into a directory. Each ends with its documented exit code and a message, never a
traceback or a pass."""

import json
import shutil
import time

import numpy as np
import pytest
from rundir_builder import request_records, write_gates, write_manifest, write_profile

from gate.cli import main

FAILING = """\
version: 1
gates:
  - name: ttft_p50
    metric: ttft
    statistic: p50
    fail: "< 1ns"
"""
PASSING = FAILING.replace("< 1ns", "< 100s")


def _run_with_its_own_gates(tmp_path):
    """A run directory as `batchgate run` leaves it: its gates copied beside the manifest, which
    names that copy by absolute path."""
    run = tmp_path / "orig"
    n = 1000
    write_profile(run, "steady", request_records(n, ttft_seconds=np.full(n, 0.1)))
    write_manifest(run, ["steady"])
    write_gates(run / "gates.yaml", FAILING)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["gates_file"] = str((run / "gates.yaml").resolve())
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_a_moved_run_is_judged_with_its_own_gates_not_the_working_directorys(
    tmp_path, monkeypatch, capsys
):
    run = _run_with_its_own_gates(tmp_path)
    monkeypatch.chdir(tmp_path)
    write_gates(tmp_path / "gates.yaml", PASSING)  # a lenient file where the user stands
    assert main(["check", "--no-write", str(run)]) == 1
    moved = run.rename(tmp_path / "moved")
    assert main(["check", "--no-write", str(moved)]) == 1
    copied = shutil.copytree(moved, tmp_path / "copied")
    (moved / "gates.yaml").write_text(PASSING)  # the original's file no longer matters
    assert main(["check", "--no-write", str(copied)]) == 1
    assert main(["report", str(copied), "--out", str(tmp_path / "r.html")]) == 1


def test_a_run_whose_gates_file_is_gone_is_refused_not_judged_with_another(
    tmp_path, monkeypatch, capsys
):
    run = _run_with_its_own_gates(tmp_path)
    monkeypatch.chdir(tmp_path)
    write_gates(tmp_path / "gates.yaml", PASSING)
    (run / "gates.yaml").unlink()
    assert main(["check", "--no-write", str(run)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "pass --gates FILE" in err


def test_a_broken_copy_of_the_runs_gates_is_exit_4(tmp_path, capsys):
    run = _run_with_its_own_gates(tmp_path)
    (run / "gates.yaml").write_text("version: [\n")
    assert main(["check", "--no-write", str(run)]) == 4
    assert "gates.yaml" in capsys.readouterr().err


def test_a_missing_gates_file_is_exit_2_in_check_as_in_run(tmp_path, capsys):
    run = _run_with_its_own_gates(tmp_path)
    assert main(["check", "--no-write", "--gates", str(tmp_path / "nope.yaml"), str(run)]) == 2
    assert "nope.yaml: no such gates file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    ["[]", '"x"', "5", "null", '{"schema_version": 1, "verdicts": "x"}',
     '{"schema_version": 1, "verdicts": [1], "exit_code": 0}',
     '{"schema_version": 1, "verdicts": [{"status": "pass"}], "exit_code": 0}'],
)  # fmt: skip
def test_a_verdicts_file_of_the_wrong_shape_is_exit_5(tmp_path, capsys, text):
    run = _run_with_its_own_gates(tmp_path)
    (run / "verdicts.json").write_text(text)
    assert main(["report", "--saved", str(run)]) == 5
    assert main(["compare", str(run), str(run)]) == 5
    err = capsys.readouterr().err
    assert "unreadable verdicts" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "data",
    [[], {"schema_version": 1, "stats": "x"},
     {"schema_version": 1, "name": "b", "created_at": "t", "run_path": "r", "provenance": {},
      "measures": {"steady/ttft/p50": "fast"}}],
)  # fmt: skip
def test_a_baseline_of_the_wrong_shape_is_exit_2(tmp_path, capsys, data):
    store = tmp_path / "store"
    store.mkdir()
    (store / "b.json").write_text(json.dumps(data))
    run = _run_with_its_own_gates(tmp_path)
    assert main(["baseline", "--baseline-dir", str(store), "show", "b"]) == 2
    assert (
        main(["check", "--no-write", "--baseline", "b", "--baseline-dir", str(store), str(run)])
        == 2
    )
    assert "b.json" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["run", "calibrate", "sweep"])
def test_out_naming_a_file_is_a_usage_error_before_anything_starts(tmp_path, capsys, verb):
    out = tmp_path / "a-file"
    out.write_text("")
    assert main([verb, "--out", str(out)]) == 2
    assert "not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("run_id", ["../escape", "..", ".", "a/b", ""])
def test_a_run_id_that_is_not_one_directory_name_is_refused(tmp_path, capsys, run_id):
    assert main(["run", "--out", str(tmp_path / "runs"), "--run-id", run_id]) == 2
    assert "--run-id" in capsys.readouterr().err
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs").exists()


def test_the_sampler_refuses_a_directory_at_once(tmp_path, capsys):
    started = time.monotonic()
    assert main(["sample", "--pid", "1", "--out", str(tmp_path), "--duration", "1"]) == 2
    assert time.monotonic() - started < 5  # it used to sample (and fail) forever
    assert "is a directory" in capsys.readouterr().err


def test_an_unknown_flag_of_a_command_is_reported_with_that_commands_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["check", str(tmp_path), "--bogus"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: batchgate check ")  # not the top-level "batchgate COMMAND"
    assert "batchgate check: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert "usage: batchgate [-h] COMMAND" in capsys.readouterr().err
