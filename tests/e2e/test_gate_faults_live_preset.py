"""The target left as it was found: a preset applied live to a running bundled server comes off
again when the run is cut short — by a crashed load generator (batchgate restores it in its
cleanup) and by batchgate itself being SIGKILLed (its restore guard does, then exits)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import e2e_support
import httpx
import pytest
from gate_fault_support import (
    GATES_YAML,
    REPO,
    Descendants,
    find_descendant,
    kill,
    run_argv,
    run_env,
    wait_for_lines,
)

pytestmark = pytest.mark.slow

PRESET = "presets:\n  big_window:\n    policy: dynamic\n    interactive: {max_wait_ms: 200}\n"


@pytest.fixture
def bundled_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    with e2e_support.bundled_server(tmp_path) as url:
        yield url


def _batching(url: str) -> dict:  # type: ignore[type-arg]
    body = httpx.get(url + "/admin/batching", timeout=5).json()
    return body.get("settings", body)


def _start(tmp_path: Path, url: str, run_id: str) -> subprocess.Popen[str]:
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML + PRESET, encoding="utf-8")
    argv = run_argv(url, gates, tmp_path / "runs", run_id, "--preset", "big_window")
    return subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env()
    )


def _wait_until(check, timeout_seconds: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_a_crashed_load_still_takes_the_live_preset_off(tmp_path: Path, bundled_server) -> None:
    before = _batching(bundled_server)
    proc = _start(tmp_path, bundled_server, "loadkill")
    watch = Descendants(proc.pid).start()
    profile = tmp_path / "runs" / "loadkill" / "steady"
    wait_for_lines(profile / "requests.jsonl", 3)
    assert _batching(bundled_server) != before  # the preset is on while the load runs
    kill(find_descendant(proc.pid, "--profile-overrides-json"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, out + err
    assert "restored the batching settings" in out + err
    assert _batching(bundled_server) == before
    assert not (profile.parent / "restore.json").exists()  # nothing owed any more
    watch.assert_all_gone()


def test_batchgate_sigkilled_with_a_live_preset_leaves_the_target_as_it_found_it(
    tmp_path: Path, bundled_server
) -> None:
    before = _batching(bundled_server)
    proc = _start(tmp_path, bundled_server, "gatekill")
    watch = Descendants(proc.pid).start()
    run_dir = tmp_path / "runs" / "gatekill"
    wait_for_lines(run_dir / "steady" / "requests.jsonl", 3)
    assert _batching(bundled_server) != before
    watch.snapshot()
    kill(proc)
    proc.communicate(timeout=30)
    assert _wait_until(lambda: _batching(bundled_server) == before), _batching(bundled_server)
    watch.assert_all_gone()  # the guard exits once it has put the settings back
    owed = json.loads((run_dir / "restore.json").read_text())
    assert owed["restored_by"] == "guard" and "restored the batching settings" in owed["outcome"]
