"""`batchgate run --scale smoke` with the default gates passes, keeps every artifact, leaves no
process behind, and `batchgate check` on the saved run reproduces its verdicts exactly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from e2e_support import (
    Finished,
    assert_no_strays,
    batchgate_argv,
    read_json,
    run_batchgate,
)

pytestmark = pytest.mark.slow

PROFILES = (
    "night_trickle", "burst", "mixed_lengths", "priority_mix", "offline_job", "trace",
    "chat_sessions", "reasoning_mix", "sampling_mix",
)  # fmt: skip
PROFILE_FILES = ("requests.jsonl", "load.json", "scrapes.jsonl", "gpu.jsonl", "steps.jsonl")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    out = tmp_path_factory.mktemp("runs")
    return run_batchgate(out, "smoke")


def test_default_smoke_run_passes(smoke_run: Finished) -> None:
    assert smoke_run.code == 0, smoke_run.stdout[-4000:] + smoke_run.stderr[-4000:]
    assert "result: PASSED (exit 0)" in smoke_run.stdout


def test_smoke_run_writes_every_artifact(smoke_run: Finished) -> None:
    run_dir = smoke_run.run_dir
    for name in ("manifest.json", "verdicts.json", "junit.xml", "summary.md", "gates.yaml"):
        assert (run_dir / name).is_file(), name
    for profile in PROFILES:
        for name in PROFILE_FILES:
            assert (run_dir / profile / name).stat().st_size > 0, f"{profile}/{name}"
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["ended"] == "completed" and manifest["reason"] is None
    assert manifest["scale"] == "smoke" and manifest["preset"] is None
    assert manifest["target"]["server_kind"] == "batchgate"
    assert manifest["target"]["model"] == "tiny"
    assert manifest["target"]["batching"]["policy"] == "continuous"
    assert len(manifest["target"]["batching_hash"]) == 64
    assert manifest["tool"]["version"]
    assert manifest["hardware"]["cpu_count"] >= 1
    assert set(manifest["profiles"]) == set(PROFILES)
    for entry in manifest["profiles"].values():
        assert entry["params"] and len(entry["params_hash"]) == 64
    assert manifest["started_at"] <= manifest["ended_at"]
    drains = [
        line
        for line in (run_dir / "burst" / "scrapes.jsonl").read_text().splitlines()
        if '"phase":"drain"' in line
    ]
    assert len(drains) == 1


def test_smoke_run_records_real_per_chunk_token_counts(smoke_run: Finished) -> None:
    # continuous_usage: auto asks the bundled server for per-chunk usage: ITL is per token.
    import json

    for profile in PROFILES:
        load = read_json(smoke_run.run_dir / profile / "load.json")
        assert load["params"]["continuous_usage"] == "on", profile
        assert set(load["chunk_tokens_sources"]) == {"usage"}, profile
        lines = (smoke_run.run_dir / profile / "requests.jsonl").read_text().splitlines()
        for record in map(json.loads, lines):
            if record["chunk_times"]:
                assert record["chunk_tokens_source"] == "usage", record["id"]
    verdicts = read_json(smoke_run.run_dir / "verdicts.json")["verdicts"]
    itl_notes = [n for v in verdicts if v["metric"] == "itl" for n in v["notes"]]
    assert not any(n.startswith("ITL per chunk") for n in itl_notes)


def test_smoke_run_writes_the_html_report(smoke_run: Finished) -> None:
    report = smoke_run.run_dir / "report.html"
    assert report.is_file(), f"no report.html\n{smoke_run.stdout}\n{smoke_run.stderr}"
    html = report.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "priority_mix" in html
    assert "report.html not written" not in smoke_run.stdout + smoke_run.stderr


def test_smoke_run_leaves_no_process_behind(smoke_run: Finished) -> None:
    assert_no_strays(smoke_run.run_dir)


def test_check_reproduces_the_run_verdicts_exactly(smoke_run: Finished, tmp_path: Path) -> None:
    before = read_json(smoke_run.run_dir / "verdicts.json")
    result = subprocess.run(
        batchgate_argv("check", str(smoke_run.run_dir)),
        cwd=tmp_path,  # no gates.yaml here: check must use the run's own copy
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    after = read_json(smoke_run.run_dir / "verdicts.json")
    assert after["verdicts"] == before["verdicts"]
    assert after["exit_code"] == before["exit_code"] == 0
