"""`batchgate tune` on the bundled server, started on settings that are not best for the workload
(a 200 ms batching window under a night trickle): it finds settings that pass every gate and
beat the incumbent's objective beyond the noise, within its budget, and writes them as a preset
that `run --preset` and `rollback` can use."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from e2e_support import assert_no_strays, batchgate_argv

from gate.gates.file import load

pytestmark = pytest.mark.slow

BUDGET_SECONDS = 240


def test_tune_finds_better_settings_than_a_big_window_under_trickle(tmp_path: Path) -> None:
    out, gates = tmp_path / "runs", tmp_path / "gates.yaml"
    result = subprocess.run(
        batchgate_argv(
            "tune", "--profile", "night_trickle", "--preset", "big_window",
            "--knobs", "policy,max_wait_ms",
            "--values", "policy=continuous,dynamic", "--values", "max_wait_ms=5,200",
            "--objective", "ttft:p50", "--budget", f"{BUDGET_SECONDS}s",
            "--write-gates", str(gates), "--preset-name", "night", "--out", str(out),
        ),
        cwd=tmp_path, capture_output=True, text=True, timeout=BUDGET_SECONDS + 240, check=False,
        # The table is read cell by cell below: a fixed width, whatever COLUMNS the caller has.
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (tune_dir,) = out.iterdir()
    data = json.loads((tune_dir / "tune.json").read_text(encoding="utf-8"))
    assert data["ended"] == "completed"
    assert data["incumbent"] == {"policy": "dynamic", "interactive.max_wait_ms": 200}
    by_key = {json.dumps(c["settings"], sort_keys=True): c for c in data["candidates"]}
    incumbent = by_key[json.dumps(data["incumbent"], sort_keys=True)]["measurements"][0]
    winner = by_key[json.dumps(data["winner"], sort_keys=True)]["measurements"]
    # The incumbent fails the trickle gate; the winner passes every gate (at its last, largest
    # measurement: on a loaded machine its first one may be inconclusive, which buys it more
    # samples, never a guess) and never failed one.
    assert incumbent["outcome"] == "fail" and "trickle_ttft@night_trickle" in incumbent["failed"]
    assert winner[-1]["outcome"] == "pass" and not winner[-1]["failed"]
    assert all(m["outcome"] in ("pass", "inconclusive") for m in winner)
    # ...and beats the incumbent's objective (TTFT p50, lower is better) beyond the noise.
    assert winner[-1]["objective_interval"][1] < incumbent["objective_interval"][0]
    # Every run the search started fits in its budget.
    runs = [m["seconds"] for c in data["candidates"] for m in c["measurements"]]
    assert len(runs) >= 4 and sum(runs) <= BUDGET_SECONDS
    # The table lists every candidate; the report has the trade-off figure.
    for c in data["candidates"]:
        assert f"max_wait_ms={c['settings']['interactive.max_wait_ms']}" in result.stdout
    html = (tune_dir / "tune.html").read_text(encoding="utf-8")
    assert "<svg" in html and "passing front" in html
    # The winner is a preset of the gates file written, with the run it came from.
    preset = load(gates).presets["night"]
    assert preset["policy"] == data["winner"]["policy"] == "continuous"
    assert tune_dir.name in gates.read_text(encoding="utf-8")
    assert_no_strays(str(tune_dir))


def test_tune_restarts_a_server_per_candidate_from_a_command(tmp_path: Path) -> None:
    """--server-cmd: a server without live settings changes is restarted for every candidate
    (here the bundled one, started as any other program would be), calibrated once on the
    --reference settings, so the incumbent's window is judged against a lone request's time
    without one."""
    import sys

    out, gates = tmp_path / "runs", tmp_path / "gates.yaml"
    marker = "--step-log-size 4097"  # unique to this test: finds a server left running
    command = (
        f"{sys.executable} -m reference_server --port {{port}} --policy {{policy}} "
        f"--interactive-max-wait-ms 200 {marker}"
    )
    result = subprocess.run(
        batchgate_argv(
            "tune", "--profile", "night_trickle", "--knobs", "policy",
            "--values", "policy=dynamic,continuous", "--reference", "policy=continuous",
            "--objective", "ttft:p50", "--budget", f"{BUDGET_SECONDS}s", "--server-cmd", command,
            "--write-gates", str(gates), "--out", str(out),
        ),
        cwd=tmp_path, capture_output=True, text=True, timeout=BUDGET_SECONDS + 240, check=False,
        # The table is read cell by cell below: a fixed width, whatever COLUMNS the caller has.
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (tune_dir,) = out.iterdir()
    data = json.loads((tune_dir / "tune.json").read_text(encoding="utf-8"))
    assert data["incumbent"] == {"policy": "dynamic"} and data["winner"] == {"policy": "continuous"}
    first = {c["settings"]["policy"]: c["measurements"][0] for c in data["candidates"]}
    assert first["dynamic"]["outcome"] == "fail"
    # Every run (a candidate inconclusive at smoke is measured again at quick) had a server of
    # its own, started from the command and stopped after.
    logs = sorted(tune_dir.glob("candidate-*/server-cmd.log"))
    runs = sum(len(c["measurements"]) for c in data["candidates"])
    assert len(logs) == runs >= len(data["candidates"]) == 2
    assert load(gates).presets["tuned"] == {"policy": "continuous"}
    assert_no_strays(str(tune_dir))
    assert_no_strays(marker)


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    """Interrupted after its first candidates: exit 5, tune.json with every candidate measured so
    far and how the search ended, no preset written, nothing left running."""
    import signal
    import time

    from e2e_support import ctrl_c_as_default

    out, gates = tmp_path / "runs", tmp_path / "gates.yaml"
    proc = subprocess.Popen(
        batchgate_argv(
            "tune", "--profile", "night_trickle", "--knobs", "max_wait_ms",
            "--values", "max_wait_ms=0,5,20,50", "--objective", "ttft:p50", "--budget", "10m",
            "--write-gates", str(gates), "--out", str(out),
        ),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_as_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("*/candidate-002-*")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert list(out.glob("*/candidate-002-*")), "the second candidate never started"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 5, stdout[-3000:] + stderr[-3000:]
    (tune_dir,) = out.iterdir()
    data = json.loads((tune_dir / "tune.json").read_text(encoding="utf-8"))
    assert data["ended"] == "interrupted" and data["preset"] is None
    assert data["candidates"][0]["measurements"][0]["outcome"] in ("pass", "fail", "inconclusive")
    assert "results so far kept" in stdout
    assert not gates.exists()
    assert_no_strays(str(tune_dir))
