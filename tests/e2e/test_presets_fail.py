"""Each failure preset of the default gates.yaml fails the gate it is there to show, exit 1, and
the report names the knob the gate implicates and the rollback command (scaled-down runs: only
the profiles the gate needs, smoke scale)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import assert_no_strays, read_json, run_batchgate, verdict

pytestmark = pytest.mark.slow

CASES = [
    # preset, profiles run, the gate that must fail, the knob it names
    ("big_window", "night_trickle", "trickle_ttft@night_trickle", "interactive.max_wait_ms"),
    ("static", "mixed_lengths", "mixed_short_e2e@mixed_lengths", "policy"),
    ("small_kv", "burst", "burst_recompute_ratio@burst", "kv_cache_memory_bytes"),
    ("shared_queue", "priority_mix", "priority_precedence@priority_mix", "shared_queue"),
    (
        "jobs_interactive",
        "offline_job",
        "chat_during_offline_job@offline_job",
        "batch_api_priority",
    ),
    ("starved_job", "offline_job", "offline_job_throughput@offline_job", "batch.max_waiting"),
    ("no_prefix_cache", "trace", "prefix_cache_hit_ratio@trace", "enable_prefix_caching"),
    (
        "no_prefix_cache",
        "chat_sessions",
        "session_prefix_reuse@chat_sessions",
        "enable_prefix_caching",
    ),
    (
        "thrash_cache",
        "chat_sessions",
        "session_prefix_reuse@chat_sessions",
        "num_gpu_blocks_override",
    ),
    (
        "align_sampling_strict",
        "sampling_mix",
        "mixed_sampling_throughput@sampling_mix",
        "sampling_alignment",
    ),
    (
        "shared_sampler_seed",
        "sampling_mix",
        "answer_consistency@sampling_mix",
        "shared_sampler_seed",
    ),
]


@pytest.mark.parametrize(
    ("preset", "profiles", "gate_id", "knob"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_failure_preset_fails_its_gate(
    tmp_path: Path, preset: str, profiles: str, gate_id: str, knob: str
) -> None:
    done = run_batchgate(tmp_path, preset, "--preset", preset, "--profile", profiles)
    assert done.code == 1, done.stdout[-4000:] + done.stderr[-4000:]
    verdicts = read_json(done.run_dir / "verdicts.json")
    assert verdicts["exit_code"] == 1
    failed = verdict(verdicts, gate_id)
    assert failed["status"] == "fail", failed
    assert failed["rollback"] == "safe"
    assert knob in failed["knob"]
    assert f"implicates batching knob: {failed['knob']}" in done.stdout
    assert "--to safe" in done.stdout
    assert "--to safe" in (done.run_dir / "summary.md").read_text(encoding="utf-8")
    manifest = read_json(done.run_dir / "manifest.json")
    assert manifest["preset"] == preset and manifest["ended"] == "completed"
    calibration = read_json(done.run_dir / "calibration.json")
    assert calibration["unloaded"]["short"]["ttft"]["p50"] > 0
    assert calibration["capacity"]["short"]["rps"] > 0
    assert_no_strays(done.run_dir)
