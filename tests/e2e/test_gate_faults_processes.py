"""The gate under its own faults (processes): the load generator SIGKILLed mid-profile, one of
two Locust workers SIGKILLed, and `batchgate run` itself SIGKILLed. Each: a clear exit (5)
and reason, every record written before the fault kept, `batchgate check` reproducing the
verdicts from what was written, and no process left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fault_target import FaultTarget
from gate_fault_support import (
    REPO,
    Descendants,
    check,
    find_descendant,
    kill,
    records,
    run_argv,
    run_env,
    statuses,
    wait_for_lines,
    write_gates,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def target():  # type: ignore[no-untyped-def]
    fake = FaultTarget()
    yield fake
    fake.stop()


def _start(tmp_path: Path, url: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    argv = run_argv(url, write_gates(tmp_path), tmp_path / "runs", run_id, *extra)
    return subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env()
    )


def _assert_check_reproduces(run_dir: Path, code: int) -> subprocess.CompletedProcess[str]:
    written = statuses(run_dir)
    again = check(run_dir)
    assert again.returncode == code, again.stdout + again.stderr
    assert statuses(run_dir) == written  # the same verdicts from the same files
    return again


def test_load_generator_sigkilled_mid_profile_exits_5_and_keeps_its_records(
    tmp_path: Path, target: FaultTarget
) -> None:
    proc = _start(tmp_path, target.url, "loadkill", "--workers", "2")
    watch = Descendants(proc.pid).start()
    profile = tmp_path / "runs" / "loadkill" / "steady"
    wait_for_lines(profile / "requests.jsonl", 3)
    before = len(records(profile / "requests.jsonl"))
    kill(find_descendant(proc.pid, "--profile-overrides-json"))  # the master, not a worker
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, out + err
    assert "run load crashed during profile 'steady'" in err and "Traceback" not in err
    manifest = json.loads((profile.parent / "manifest.json").read_text())
    assert manifest["ended"] == "load_crashed"
    assert len(records(profile / "requests.jsonl")) >= before  # nothing written was lost
    assert not (profile / "load.json").exists()  # the cut: no summary, and check says so
    again = _assert_check_reproduces(profile.parent, 5)
    assert "load.json missing" in again.stdout + again.stderr
    watch.assert_all_gone()  # the master's two workers quit once it was gone


def test_one_of_two_workers_sigkilled_exits_5_and_the_others_records_are_kept(
    tmp_path: Path, target: FaultTarget
) -> None:
    proc = _start(tmp_path, target.url, "workerkill", "--workers", "2")
    watch = Descendants(proc.pid).start()
    profile = tmp_path / "runs" / "workerkill" / "steady"
    wait_for_lines(profile / "requests.jsonl", 3)
    kill(find_descendant(proc.pid, "loadgen.worker"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, out + err
    assert "load crashed" in err and "mid-run" in err and "Traceback" not in err
    load = json.loads((profile / "load.json").read_text())
    assert load["ended"] == "crashed"
    assert "only 1 of 2 workers reported their summary" in load["invalid_reasons"]
    kept = records(profile / "requests.jsonl")
    assert len(kept) >= 3 and sum(load["counts_by_status"].values()) == len(kept)
    _assert_check_reproduces(profile.parent, 5)
    watch.assert_all_gone()


def test_batchgate_run_sigkilled_leaves_no_process_and_a_checkable_directory(
    tmp_path: Path, target: FaultTarget
) -> None:
    proc = _start(tmp_path, target.url, "gatekill")
    watch = Descendants(proc.pid).start()
    profile = tmp_path / "runs" / "gatekill" / "steady"
    wait_for_lines(profile / "requests.jsonl", 3)
    watch.snapshot()
    kill(proc)
    proc.communicate(timeout=30)
    # Nothing it started outlives it (Linux parent-death signal): the load process was told
    # SIGINT, so it cancelled what was in flight and still wrote its load.json.
    watch.assert_all_gone()
    load = json.loads((profile / "load.json").read_text())
    assert load["ended"] == "interrupted"
    assert sum(load["counts_by_status"].values()) == len(records(profile / "requests.jsonl"))
    manifest = json.loads((profile.parent / "manifest.json").read_text())
    assert manifest["ended"] == "running" and "could not record how it ended" in manifest["reason"]
    assert not (profile.parent / "verdicts.json").exists()  # nobody judged it
    again = check(profile.parent)
    assert again.returncode == 5, again.stdout + again.stderr
    assert "could not record how it ended" in again.stdout + again.stderr
    assert set(statuses(profile.parent).values()) == {"no_data"}


def test_batchgate_run_sigkilled_takes_its_bundled_server_down_too(tmp_path: Path) -> None:
    gates = write_gates(tmp_path)
    argv = run_argv("-", gates, tmp_path / "runs", "bundledkill")
    argv = [a for a in argv if a not in ("--target", "-")]  # no --target: the bundled server
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env()
    )
    watch = Descendants(proc.pid).start()
    profile = tmp_path / "runs" / "bundledkill" / "steady"
    wait_for_lines(profile / "requests.jsonl", 3, timeout_seconds=180.0)
    server = find_descendant(proc.pid, "reference_server")
    watch.snapshot()
    kill(proc)
    proc.communicate(timeout=30)
    watch.assert_all_gone(timeout_seconds=30.0)  # the server got SIGTERM and shut down
    assert server.pid in watch.seen
    load = json.loads((profile / "load.json").read_text())
    assert load["ended"] == "interrupted"
