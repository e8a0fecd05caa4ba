"""A run cut short never passes: the target killed mid-run, the load process killed, Ctrl-C —
each gives exit 5 with the reason on stderr and in manifest.json, keeps the artifacts written
so far, and leaves no process behind. Bad input is refused before anything starts."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from e2e_support import (
    REPO,
    assert_no_strays,
    batchgate_argv,
    finish,
    read_json,
    start_run,
    wait_for_child,
    wait_for_file,
)

# Long enough (30 s at smoke scale) that the fault surely lands while the load runs.
LONG_TRICKLE = ("--profile", "night_trickle", "--set", "night_trickle.main_seconds=600")


def _start_and_wait_for_requests(out: Path, run_id: str):  # type: ignore[no-untyped-def]
    proc = start_run(out, run_id, *LONG_TRICKLE)
    # The run calibrates the target first (~15-30 s; longer on a loaded machine).
    wait_for_file(out / run_id / "night_trickle" / "requests.jsonl", 180.0, min_lines=2)
    return proc


@pytest.mark.slow
def test_target_killed_mid_run_gives_exit_5_with_reason_and_artifacts(tmp_path: Path) -> None:
    proc = _start_and_wait_for_requests(tmp_path, "killed")
    wait_for_child(proc.pid, "reference_server", 5.0).kill()
    done = finish(proc, tmp_path / "killed")
    assert done.code == 5, done.stderr
    assert "target died" in done.stderr and "exited with code" in done.stderr
    manifest = read_json(done.run_dir / "manifest.json")
    assert manifest["ended"] == "target_died"
    assert "exited with code" in manifest["reason"]
    profile = done.run_dir / "night_trickle"
    assert (profile / "requests.jsonl").stat().st_size > 0
    assert (profile / "scrapes.jsonl").stat().st_size > 0
    verdicts = read_json(done.run_dir / "verdicts.json")
    assert verdicts["exit_code"] == 5
    assert all(v["status"] != "pass" for v in verdicts["verdicts"])
    assert_no_strays(done.run_dir)


@pytest.mark.slow
def test_target_killed_during_calibration_ends_the_run_as_target_died(tmp_path: Path) -> None:
    proc = start_run(tmp_path, "calkilled", *LONG_TRICKLE)
    lone = tmp_path / "calkilled" / "calibration" / "lone" / "steady" / "requests.jsonl"
    wait_for_file(lone, 90.0, min_lines=1)
    wait_for_child(proc.pid, "reference_server", 5.0).kill()
    done = finish(proc, tmp_path / "calkilled")
    assert done.code == 5, done.stderr
    assert "target died during profile 'calibration (lone)'" in done.stderr
    assert "Traceback" not in done.stderr
    manifest = read_json(done.run_dir / "manifest.json")
    assert manifest["ended"] == "target_died"
    assert not (done.run_dir / "night_trickle").exists()  # no profile ran on a dead target
    assert_no_strays(done.run_dir)


@pytest.mark.slow
def test_load_process_killed_gives_exit_5(tmp_path: Path) -> None:
    proc = _start_and_wait_for_requests(tmp_path, "crashed")
    wait_for_child(proc.pid, "--profile-overrides-json", 5.0).kill()
    done = finish(proc, tmp_path / "crashed")
    assert done.code == 5, done.stderr
    assert "load crashed" in done.stderr
    assert read_json(done.run_dir / "manifest.json")["ended"] == "load_crashed"
    assert (done.run_dir / "night_trickle" / "requests.jsonl").stat().st_size > 0
    assert_no_strays(done.run_dir)


@pytest.mark.slow
def test_ctrl_c_gives_exit_5_and_stops_every_child(tmp_path: Path) -> None:
    proc = _start_and_wait_for_requests(tmp_path, "interrupted")
    proc.send_signal(signal.SIGINT)
    done = finish(proc, tmp_path / "interrupted", timeout_seconds=60.0)
    assert done.code == 5, done.stderr
    assert "interrupted" in done.stderr
    manifest = read_json(done.run_dir / "manifest.json")
    assert manifest["ended"] == "interrupted"
    load = read_json(done.run_dir / "night_trickle" / "load.json")
    assert load["ended"] == "interrupted"  # the load generator was stopped politely
    assert_no_strays(done.run_dir)


def _quick(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        batchgate_argv("run", "--scale", "smoke", "--out", str(tmp_path / "runs"), *args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_invalid_gates_file_exits_4_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "gates.yaml"
    bad.write_text("version: 1\ngates:\n  - {name: x, metric: ttft_typo, fail: '< 1s'}\n")
    result = _quick(tmp_path, "--gates", str(bad))
    assert result.returncode == 4
    assert "gates.yaml:3" in result.stderr and "ttft_typo" in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--preset", "no_such_preset"), "unknown preset 'no_such_preset'"),
        (("--profile", "no_such_profile"), "no_such_profile"),
        (("--set", "burst.no_such_param=1", "--profile", "burst"), "no_such_param"),
        (("--target", "ftp://example"), "--target must be an http(s) URL"),
    ],
    ids=["preset", "profile", "override", "target"],
)
def test_usage_errors_exit_2_before_anything_starts(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = _quick(tmp_path, *args)  # the packaged default gates
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()
