"""The pieces of `batchgate run` that need no server: preset flags, the gate suite a run keeps,
the live view's file tail and snapshot, child-process stop of a whole group."""

from __future__ import annotations

import io
import json
import sys
from importlib import resources
from pathlib import Path

import pytest
from process_scan import processes_mentioning

from gate.gates.file import load
from gate.orchestrator.live import LiveView, RecordTail
from gate.orchestrator.preset_flags import live_settings, server_flags, start_only
from gate.orchestrator.processes import start_child
from gate.orchestrator.suite import select_suite

GATES = Path(str(resources.files("gate.gates").joinpath("default.yaml")))  # the packaged default


def test_preset_becomes_server_flags_and_a_live_change() -> None:
    preset = {
        "policy": "dynamic",
        "shared_queue": False,
        "kv_cache_memory_bytes": 2097152,
        "interactive": {"max_wait_ms": 200.0, "max_batch_size": 16},
    }
    assert server_flags(preset) == [
        "--policy",
        "dynamic",
        "--no-shared-queue",
        "--kv-cache-memory-bytes",
        "2097152",
        "--interactive-max-wait-ms",
        "200",
        "--interactive-max-batch-size",
        "16",
    ]
    assert start_only(preset) == {"kv_cache_memory_bytes": 2097152}
    assert "kv_cache_memory_bytes" not in live_settings(preset)
    assert live_settings(preset)["interactive"] == {"max_wait_ms": 200.0, "max_batch_size": 16}


def test_every_default_preset_is_accepted_by_the_server_command_line() -> None:
    from reference_server.api.cli import parse_configs  # the server's own flags and checks

    presets = load(GATES).presets
    engines = {name: parse_configs(server_flags(p))[0] for name, p in presets.items()}
    assert engines["small_kv"].num_gpu_blocks_override == 16
    assert engines["static"].batching.policy == "static"
    assert engines["shared_queue"].batching.shared_queue is True
    assert engines["jobs_interactive"].batching.batch_api_priority == "interactive"
    assert engines["starved_job"].batching.batch.max_waiting == 1
    big = engines["big_window"].batching
    assert big.policy == "dynamic" and big.interactive.max_wait_ms == 200.0
    safe = engines["safe"].batching
    assert safe == parse_configs([])[0].batching  # `safe` is the server's default settings


def test_suite_keeps_the_gates_of_the_profiles_run(tmp_path: Path) -> None:
    gates = load(GATES)
    text = GATES.read_text(encoding="utf-8")
    # Every profile the file configures: a new profile's gates join the suite without an edit.
    full = select_suite(gates, text, list(gates.profiles), tmp_path / "all")
    assert full.skipped == ()
    assert (tmp_path / "all" / "gates.yaml").read_text(encoding="utf-8") == text
    only = select_suite(gates, text, ["priority_mix"], tmp_path / "prio")
    names = {g.name for g in only.gates_file.gates}
    assert "priority_precedence" in names and "no_errors" in names
    assert "priority_isolation" not in names  # its reference profile is not run
    assert "burst_recompute_ratio" not in names
    assert any(
        s.startswith("priority_isolation (reference profile night_trickle") for s in only.skipped
    )
    assert load(tmp_path / "prio" / "gates.yaml").gates == only.gates_file.gates


def test_record_tail_reads_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    tail = RecordTail(path)
    assert tail.read_new() == []
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")
    assert tail.read_new() == [{"a": 1}, {"a": 2}]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("3}\n")
    assert tail.read_new() == [{"a": 3}]
    assert tail.read_new() == []


def test_live_view_without_a_terminal_prints_plain_progress_lines(tmp_path: Path) -> None:
    directory = tmp_path / "burst"
    directory.mkdir()
    records = [
        {
            "status": "ok",
            "planned_at": 10.0 + i,
            "sent_at": 10.0 + i,
            "first_token_at": 10.05 + i,
            "done_at": 10.5 + i,
        }
        for i in range(10)
    ] + [
        {
            "status": "http_error",
            "planned_at": 20.0,
            "sent_at": 20.0,
            "first_token_at": None,
            "done_at": 20.1,
        }
    ]
    (directory / "requests.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    (directory / "scrapes.jsonl").write_text(
        json.dumps(
            {"metrics": {"kv_usage_ratio": 0.25, "num_requests_waiting": {"interactive": 3}}}
        )
        + "\n"
    )
    (directory / "gpu.jsonl").write_text(json.dumps({"memory_used_bytes": 2**30}) + "\n")
    stream = io.StringIO()
    view = LiveView(stream=stream, tty=False, plain_every_seconds=0.0)
    view.begin(profile="burst", directory=directory, index=2, total=4, duration_seconds=19.0)
    view.refresh()
    view.end()
    text = stream.getvalue()
    assert "profile 2/4 burst started" in text
    line = next(row for row in text.splitlines() if "done 11" in row)
    assert "errors 1" in line and "TTFT p99 (rolling) 50 ms" in line
    assert "KV usage 25%" in line and "queue 3" in line and "memory 1024 MiB" in line
    assert "(load ended)" in text


def test_child_stop_ends_its_whole_process_group(tmp_path: Path) -> None:
    marker = f"batchgate-test-sleeper-{tmp_path.name}"
    script = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
        "time.sleep(60)\n"
    )
    child = start_child(
        "sleeper", [sys.executable, "-c", script, marker], log_path=tmp_path / "sleeper.log"
    )
    try:
        import time

        deadline = time.monotonic() + 10.0
        while len(processes_mentioning(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_mentioning(marker)) == 2
        child.stop(timeout_seconds=5.0)
        # stop() waits for the group's leader; the killed grandchild may take a moment to go.
        deadline = time.monotonic() + 10.0
        while processes_mentioning(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_mentioning(marker) == []
    finally:
        child.stop(timeout_seconds=1.0)


@pytest.mark.parametrize("text", ["burst", "a,b", " x , y "])
def test_profile_list_is_split_on_commas(text: str) -> None:
    from gate.orchestrator.plan import choose_profiles

    assert choose_profiles(load(GATES), text) == [p.strip() for p in text.split(",")]


def test_without_a_batch_api_the_offline_job_gates_and_profile_are_left_out(
    tmp_path: Path,
) -> None:
    from gate.orchestrator.capabilities import unmeasurable_reason
    from gate.orchestrator.suite import orphaned_profiles
    from gate.orchestrator.target import TargetInfo

    gates = load(GATES)
    profiles = list(gates.profiles)
    why = "the target has no Batch API (/v1/batches answered HTTP 404)"
    info = TargetInfo(
        url="http://127.0.0.1:9", server_kind="openai", model="m", batching=None, no_batch_api=why
    )
    unmeasurable = {g.name: r for g in gates.gates if (r := unmeasurable_reason(g, info))}
    # The chat ratio would compare chat with chat and pass with no job run: left out too.
    assert set(unmeasurable) == {
        "chat_during_offline_job",
        "offline_job_throughput",
        "offline_job_completed",
    }
    assert all(why in r for r in unmeasurable.values())
    suite = select_suite(
        gates, GATES.read_text(encoding="utf-8"), profiles, tmp_path, unmeasurable=unmeasurable
    )
    assert orphaned_profiles(gates, suite.gates_file) == ["offline_job"]
    with_api = TargetInfo(url="http://127.0.0.1:9", server_kind="openai", model="m", batching=None)
    assert not [g for g in gates.gates if unmeasurable_reason(g, with_api)]
    assert orphaned_profiles(gates, gates) == []


def test_a_crashed_loads_message_keeps_its_error_line_above_the_tail(tmp_path: Path) -> None:
    from gate.orchestrator.session import _tail

    log = tmp_path / "load.log"
    lines = ["loadgen: error: load worker process 7 exited with code -9 mid-run; stopping"]
    lines += [f"noise {n}" for n in range(8)]
    log.write_text("\n".join(lines) + "\n")
    shown = _tail(log).splitlines()[1:]
    assert [line.strip() for line in shown] == [lines[0], *lines[-5:]]
    log.write_text("a\nb\n")  # short: all of it, once
    assert _tail(log) == "\n  a\n  b"
    assert _tail(tmp_path / "absent.log") == ""
