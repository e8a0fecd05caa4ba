"""The gate under its own faults (the target, the disk): a target that answers with malformed
SSE, stalls mid-stream or closes mid-body, and a run directory on a filesystem that fills up
mid-run. The target's faults are data (each request's record says what went wrong and the
error gate fails: exit 1); a full disk is a fault of the run (exit 5, `write_failed`). Either
way the records written before are kept, `batchgate check` reproduces the verdicts, and no
process is left behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fault_target import FaultTarget
from gate_fault_support import (
    REPO,
    Descendants,
    check,
    records,
    run_argv,
    run_env,
    statuses,
    wait_for_lines,
    write_gates,
)

pytestmark = pytest.mark.slow

EXPECTED = {
    "malformed_sse": ("protocol_error", "malformed"),
    "stall_mid_stream": ("timeout", "no complete response within 3 s"),
    "close_mid_body": ("connection_error", "closed"),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_a_target_that_breaks_its_streams_fails_the_error_gate_with_every_record(
    tmp_path: Path, fault: str
) -> None:
    target = FaultTarget()
    try:
        argv = run_argv(target.url, write_gates(tmp_path), tmp_path / "runs", fault)
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env()
        )
        watch = Descendants(proc.pid).start()
        profile = tmp_path / "runs" / fault / "steady"
        wait_for_lines(profile / "requests.jsonl", 3)
        target.set(stream_fault=fault)
        out, err = proc.communicate(timeout=180)
        before_fault = target.completions
    finally:
        target.stop()
    assert proc.returncode == 1, out + err  # a gate failed; the measurement itself completed
    assert "Traceback" not in err
    status, words = EXPECTED[fault]
    kept = records(profile / "requests.jsonl")
    broken = [r for r in kept if r["status"] == status]
    assert broken and all(words in r["error"] for r in broken), {r["error"] for r in broken}
    assert {r["status"] for r in kept} <= {"ok", status, "cancelled"}
    load = json.loads((profile / "load.json").read_text())
    assert load["ended"] == "completed" and sum(load["counts_by_status"].values()) == len(kept)
    assert len(kept) == load["sent_requests"] <= before_fault  # every request sent has a record
    written = statuses(profile.parent)
    assert written["no_errors@steady"] == "fail"
    again = check(profile.parent)
    assert again.returncode == 1, again.stdout + again.stderr
    assert statuses(profile.parent) == written
    watch.assert_all_gone()


def _can_mount_tmpfs() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>&1 || exit 3"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot mount a size-limited tmpfs here (unshare -rm): {probe.stdout.strip()}"
    return None


def test_a_run_directory_that_fills_up_exits_5_and_keeps_what_was_written(tmp_path: Path) -> None:
    why = _can_mount_tmpfs()
    if why is not None:
        pytest.skip(why)
    copy = tmp_path / "copy"
    driver = Path(__file__).with_name("full_disk_driver.py")
    done = subprocess.run(
        ["unshare", "-rm", sys.executable, str(driver), str(tmp_path / "disk"), str(copy)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=run_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 5, result["stderr"]
    assert "run write failed" in result["stderr"] and "No space left on device" in result["stderr"]
    assert "Traceback" not in result["stderr"]
    assert result["left_behind"] == [], result["left_behind"]
    assert result["seen_children"] > 0
    kept = records(copy / "steady" / "requests.jsonl")
    assert len(kept) >= result["records_before_fill"] >= 3  # nothing written before was lost
    again = check(copy)  # on a disk with room: the verdicts of what was written
    assert again.returncode == 5, again.stdout + again.stderr
    said = again.stdout + again.stderr
    assert "load.json missing" in said or "crashed" in said, said
