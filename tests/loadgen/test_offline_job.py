"""The `offline_job` profile: chat traffic at a steady rate while a Batch API job runs.

Against the real bundled server (port 0, polled /health) the job goes submitted -> in_progress
-> completed with every line answered, and load.json carries its summary; against the fake
OpenAI server, which has no Batch API, the job is recorded as `not_supported` and the chat part
runs and completes as usual. Plus the profile's parameters and the job's input lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lg_support import REPO, FakeServer, read_load, read_records, run_loadgen

from loadgen.batch_job import BatchJob, build_job_lines
from loadgen.errors import ConfigError
from loadgen.plan import build_plan
from loadgen.profiles import resolve
from loadgen.records import validate_load_json, validate_record

_START_TIMEOUT_SECONDS = 120.0


def _timeline(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "batch_job.jsonl").read_text().splitlines() if x]


# -- profile and input lines (pure) --------------------------------------------------------


def test_job_lines_scale_like_durations_unless_the_duration_is_explicit() -> None:
    assert resolve("offline_job", {}, "full").params["job_lines"] == 2000
    assert resolve("offline_job", {}, "smoke").params["job_lines"] == 100
    assert (
        resolve("offline_job", {"duration_seconds": 6, "job_lines": 20}).params["job_lines"] == 20
    )


def test_chat_records_carry_before_job_and_during_job_split_at_the_submit_time(
    tmp_path: Path,
) -> None:
    spec = resolve("offline_job", {"rate_rps": 20, "job_submit_at_ratio": 0.4}, "smoke")
    submit_offset = BatchJob(
        spec=spec, target_url="http://127.0.0.1:9", model="m", api_key=None, out_dir=tmp_path
    ).submit_offset_seconds
    bounds = spec.schedule.stage_bounds()
    assert [name for name, _, _ in bounds] == ["before_job", "during_job"]
    assert bounds[0][2] == pytest.approx(submit_offset)  # the job goes in as during_job begins
    assert {s.rate_rps for s in spec.schedule.stages} == {20.0}
    plan = build_plan(spec)
    assert {r.stage for r in plan} == {"before_job", "during_job"}
    assert all((r.stage == "during_job") == (r.offset_seconds >= submit_offset) for r in plan)
    # The job sent at the start or at the end leaves a single (non-empty) stage.
    assert [s.name for s in resolve("offline_job", {"job_submit_at_ratio": 0}).schedule.stages] == [
        "during_job"
    ]
    assert [s.name for s in resolve("offline_job", {"job_submit_at_ratio": 1}).schedule.stages] == [
        "before_job"
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        {"job_lines": 0},
        {"job_lines": "many"},
        {"job_submit_at_ratio": 1.5},
        {"job_wait_seconds": -1},
        {"job_poll_seconds": 0},
        {"job_output_tokens": {"kind": "nope"}},
        {"job_nonsense": 1},
    ],
)
def test_bad_job_parameters_are_config_errors(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        resolve("offline_job", overrides)


def test_job_lines_are_batch_api_chat_requests_with_unique_ids_and_seeded_lengths() -> None:
    spec = resolve(
        "offline_job",
        {"job_lines": 50, "job_output_tokens": {"kind": "uniform", "low": 2, "high": 5}},
    )
    lines = build_job_lines(spec, model="m")
    again = build_job_lines(spec, model="m")
    assert lines == again  # same seed, same job
    assert len({line["custom_id"] for line in lines}) == 50
    for line in lines:
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        assert line["body"]["model"] == "m"
        assert 2 <= line["body"]["max_tokens"] <= 5
        assert 16 <= len(line["body"]["messages"][0]["content"]) <= 64


# -- against the bundled server ------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("bundled")
    port_file, log_path = workdir / "port", workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", "0", "--port-file",
             str(port_file), "--device", "cpu", "--max-model-len", "512",
             "--data-dir", str(workdir / "data"), "--log-level", "warning"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    try:
        yield _wait_healthy(process, port_file, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(process: subprocess.Popen[bytes], port_file: Path, log_path: Path) -> str:
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited:\n{log_path.read_text(errors='replace')[-3000:]}")
        text = port_file.read_text().strip() if port_file.exists() else ""
        if text:
            url = f"http://127.0.0.1:{text}"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.05)
    pytest.fail(f"server not healthy in time:\n{log_path.read_text(errors='replace')[-3000:]}")


@pytest.mark.slow
def test_job_completes_on_the_bundled_server_beside_the_chat_traffic(
    bundled_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "offline_job"
    result = run_loadgen(
        "--target", bundled_url, "--profile", "offline_job", "--out", str(out),
        "--duration", "6", "--rate", "2", "--seed", "3",
        "--set", "job_lines=20", "--set", "job_output_tokens=4",
        "--set", "output_tokens=8", "--set", "job_wait_seconds=40",
        # the tiny job runs in well under a second: poll often (the timeline has several polls)
        "--set", "job_poll_seconds=0.02",
        "--set", "max_schedule_lag_p99_seconds=10", "--set", "max_client_cpu_ratio=10",
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    timeline = _timeline(out)
    events = [e["event"] for e in timeline]
    assert events[0] == "uploaded" and events[1] == "submitted" and events[-1] == "summary"
    statuses = [e["status"] for e in timeline[1:-1]]
    assert statuses[-1] == "completed"
    # The create answer says validating; whether a poll catches in_progress depends on how fast
    # the machine runs 20 tiny lines, so the server's own in_progress_at says the job ran.
    assert statuses[0] == "validating"
    assert set(statuses) <= {"validating", "in_progress", "finalizing", "completed"}
    assert timeline[-2]["server_times"]["in_progress_at"] is not None
    for line in timeline:
        assert isinstance(line["wall"], float) and isinstance(line["monotonic"], float)
    summary = timeline[-1]
    assert summary["status"] == summary["batch_status"] == "completed"
    assert summary["lines_total"] == summary["lines_completed"] == 20
    assert summary["lines_failed"] == 0
    assert summary["output_tokens"] is not None and 0 < summary["output_tokens"] <= 20 * 4
    assert summary["polls"] >= 2
    assert (
        summary["submit_planned_at"]
        <= summary["submitted_at"]
        <= summary["in_progress_at"]
        <= summary["completed_at"]
        <= summary["ended_at"]
    )

    load = read_load(out)
    assert load["ended"] == "completed" and validate_load_json(load) == []
    job = load["batch_job"]
    assert job["status"] == "completed" and job["lines_completed"] == 20
    assert job["batch_id"] == summary["batch_id"]
    assert job["duration_seconds"] == pytest.approx(
        summary["completed_at"] - summary["submitted_at"]
    )
    # the job was submitted part-way through the chat schedule (a quarter of it by default)
    assert job["submit_planned_at"] == pytest.approx(load["window"]["start"] + 0.25 * 6)
    assert load["window"]["end"] == pytest.approx(load["window"]["start"] + 6)  # the chat's
    assert job["ended_at"] >= job["completed_at"]

    records = read_records(out)
    assert records and all(r["status"] == "ok" for r in records)
    for r in records:
        validate_record(r)
    assert load["counts_by_status"] == {"ok": len(records)}


# -- against a target without the Batch API --------------------------------------------------


@pytest.mark.slow
def test_job_is_not_supported_on_a_target_without_batches_and_chat_still_runs(
    fake_server: Callable[..., FakeServer], tmp_path: Path
) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "offline_job"
    result = run_loadgen(
        "--target", server.url, "--profile", "offline_job", "--out", str(out),
        "--duration", "3", "--rate", "5", "--set", "job_lines=10",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    timeline = _timeline(out)
    assert [e["event"] for e in timeline] == ["summary"]
    summary = timeline[0]
    assert summary["status"] == "not_supported"
    assert summary["http_status"] == 404
    assert "/v1/files" in summary["error"]
    load = read_load(out)
    assert load["ended"] == "completed" and validate_load_json(load) == []
    assert load["batch_job"]["status"] == "not_supported"
    assert load["batch_job"]["http_status"] == 404
    records = read_records(out)
    assert len(records) == load["sent_requests"] > 0
    assert load["counts_by_status"] == {"ok": len(records)}


def test_other_profiles_carry_no_batch_job(
    fake_server: Callable[..., FakeServer], tmp_path: Path
) -> None:
    server = fake_server("--ttft-ms", "2", "--itl-ms", "1")
    out = tmp_path / "steady"
    result = run_loadgen(
        "--target", server.url, "--profile", "steady", "--out", str(out),
        "--duration", "1", "--rate", "5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "batch_job" not in read_load(out)
    assert not (out / "batch_job.jsonl").exists()


@pytest.mark.slow
def test_a_job_past_its_wait_is_timed_out_and_cancelled(bundled_url: str, tmp_path: Path) -> None:
    out = tmp_path / "offline_job"
    result = run_loadgen(
        "--target", bundled_url, "--profile", "offline_job", "--out", str(out),
        "--duration", "1", "--rate", "2",
        # submitted as the chat schedule ends, with no time to wait for it
        "--set", "job_submit_at_ratio=1", "--set", "job_wait_seconds=0",
        "--set", "job_lines=50", "--set", "job_output_tokens=32",
        "--set", "max_schedule_lag_p99_seconds=10", "--set", "max_client_cpu_ratio=10",
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    timeline = _timeline(out)
    assert [e["event"] for e in timeline][:2] == ["uploaded", "submitted"]
    assert "cancel_requested" in [e["event"] for e in timeline]
    summary = timeline[-1]
    assert summary["event"] == "summary" and summary["status"] == "timed_out"
    assert summary["batch_status"] in ("cancelling", "cancelled")
    load = read_load(out)
    assert load["ended"] == "completed" and validate_load_json(load) == []
    assert load["batch_job"]["status"] == "timed_out"


@pytest.mark.slow
def test_sigint_before_the_job_is_sent_records_it_interrupted(
    fake_server: Callable[..., FakeServer], tmp_path: Path
) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    out = tmp_path / "offline_job"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "--target", server.url, "--profile", "offline_job",
         "--out", str(out), "--duration", "60", "--rate", "10", "--set", "job_lines=10"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while server.stats()["requests_total"] < 5 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGINT did not stop the run") from None
    assert proc.returncode == 5, stderr
    timeline = _timeline(out)
    assert [(e["event"], e["status"]) for e in timeline] == [("summary", "interrupted")]
    load = read_load(out)
    assert load["ended"] == "interrupted" and validate_load_json(load) == []
    assert load["batch_job"]["status"] == "interrupted"
    assert load["batch_job"]["submitted_at"] is None
