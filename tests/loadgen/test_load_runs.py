"""Whole load runs (`python -m loadgen` in a subprocess) against the fake server."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest
from lg_support import REPO, itl_gaps, read_load, read_records, run_loadgen

from loadgen.parquet import validate_parquet
from loadgen.percentile import percentile
from loadgen.plan import build_plan
from loadgen.profiles import resolve
from loadgen.records import validate_load_json, validate_record


def test_help_and_usage_errors_never_import_locust() -> None:
    code = (
        "import sys\n"
        "from loadgen.cli import main\n"
        "rc = main(['--profile', 'steady', '--out', 'x', '--target', 'http://h',\n"
        "           '--set', 'bogus=1'])\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert rc == 2, rc\n"
        "assert 'locust' not in sys.modules and 'gevent' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert "unknown profile parameter 'bogus'" in result.stderr


def test_usage_errors_exit_2_and_unreachable_target_exits_5(tmp_path) -> None:
    bad = run_loadgen("--target", "http://127.0.0.1:9", "--profile", "steady")
    assert bad.returncode == 2 and "missing required option(s): --out" in bad.stderr
    bad = run_loadgen(
        "--profile", "steady", "--out", str(tmp_path), "--target", "x", "--rate", "-1"
    )
    assert bad.returncode == 2 and "rate_rps must be > 0" in bad.stderr
    down = run_loadgen(
        "--target", "http://127.0.0.1:9", "--profile", "steady", "--out", str(tmp_path)
    )
    assert down.returncode == 5 and "target unreachable" in down.stderr
    assert not (tmp_path / "load.json").exists()


@pytest.mark.slow
def test_open_loop_run_writes_valid_records_with_exact_ttft_and_itl(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "25", "--itl-ms", "6")
    out = tmp_path / "steady"
    result = run_loadgen(
        "--target",
        server.url,
        "--profile",
        "steady",
        "--out",
        str(out),
        "--duration",
        "2.5",
        "--rate",
        "20",
        "--set",
        "output_tokens=6",
        "--seed",
        "3",
    )
    assert result.returncode == 0, result.stderr
    records, load = read_records(out), read_load(out)
    assert validate_load_json(load) == []
    assert all(validate_record(r) == [] for r in records)
    # requests.parquet (docs/records.md) is left beside the JSONL by a finished run.
    assert validate_parquet(out / "requests.jsonl") == []
    assert len(records) == load["sent_requests"] == load["planned_requests"] > 20
    assert load["counts_by_status"] == {"ok": len(records)}
    assert load["measurement_valid"] and load["ended"] == "completed"
    assert load["schedule_lag_seconds"]["p99"] < load["limits"]["max_schedule_lag_p99_seconds"]
    assert server.stats()["requests_total"] == len(records)
    # `continuous_usage: auto` on a server without /metrics: not asked, one token a chunk
    assert load["params"]["continuous_usage"] == "off"
    assert load["chunk_tokens_sources"] == {"assumed": len(records)}
    ttft = statistics.median(r["first_token_at"] - r["sent_at"] for r in records)
    itl = statistics.median(itl_gaps(records))
    # Client TTFT against the server's own (request read -> first content written), which holds
    # the server's late wake-ups on a loaded machine: the rest is the client's share.
    server_ttft = statistics.median(server.stats()["ttft_seconds"])
    assert 0.025 - 0.0005 <= server_ttft <= ttft < server_ttft + 0.002, (ttft, server_ttft)
    assert 0.006 - 0.0005 <= itl < 0.006 + 0.003, itl  # one-sided: late wake-ups only lengthen
    # the subprocess planned exactly what the same seed plans in-process
    spec = resolve(
        "steady", {"duration_seconds": 2.5, "rate_rps": 20, "output_tokens": 6, "seed": 3}, "full"
    )
    assert load["planned_requests"] == len(build_plan(spec))
    assert abs(load["achieved_rate_rps"] - len(records) / 2.5) < 1e-9
    # the rate actually sent follows the planned Poisson rate (sending kept the schedule)
    sent, planned = sorted(r["sent_at"] for r in records), sorted(r["planned_at"] for r in records)
    sent_rate = (len(sent) - 1) / (sent[-1] - sent[0])
    planned_rate = (len(planned) - 1) / (planned[-1] - planned[0])
    assert abs(sent_rate - planned_rate) / planned_rate < 0.05


_STALL_SERVER = ("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
_STALL = ("--stall-at-request", "40", "--stall-ms", "1000")


def _loadgen_proc(url: str, out, *extra: str) -> subprocess.Popen[str]:
    args = ["--target", url, "--profile", "steady", "--out", str(out), "--duration", "2.5"]
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", *args, "--rate", "40", *extra],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_server_stall_shows_in_open_loop_p99_but_hides_in_closed_loop(
    fake_server, tmp_path
) -> None:
    # Both runs at once (each against its own server) to keep the test short.
    runs = {
        "open": _loadgen_proc(
            fake_server(*_STALL_SERVER, *_STALL).url, tmp_path / "open", "--set", "arrival=constant"
        ),
        "closed": _loadgen_proc(
            fake_server(*_STALL_SERVER, *_STALL).url,
            tmp_path / "closed",
            "--closed-loop",
            "--users",
            "2",
            "--think-time",
            "0.005",
        ),
    }
    from_planned, closed_records = {}, []
    for name, proc in runs.items():
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        records = read_records(tmp_path / name)
        assert all(r["status"] == "ok" for r in records)
        from_planned[name] = [r["first_token_at"] - r["planned_at"] for r in records]
        if name == "closed":
            closed_records = records
    open_loop, closed = from_planned["open"], from_planned["closed"]
    # Open loop: every request planned during the 1 s stall waits for it.
    assert percentile(open_loop, 99) > 0.5
    # Closed loop: only the 2 in-flight requests see it; the users simply stop asking, and ask
    # again once it is over (counted, not timed: how many fit in the rest depends on the machine).
    assert max(closed) > 0.5
    stall_over = max(
        r["done_at"] for r in closed_records if r["first_token_at"] - r["planned_at"] > 0.5
    )
    assert len(closed) > 40 and any(r["planned_at"] > stall_over for r in closed_records)
    # Only the requests in flight when the stall hit (one per user) waited it out. A count, not
    # a p99 bound in seconds: the p99 of ~150 samples sits next to those two and moved with the
    # machine's load (0.32 s once on a loaded machine).
    assert sum(1 for waited in closed if waited > 0.5) <= 2
    assert read_load(tmp_path / "closed")["mode"] == "closed"
    assert read_load(tmp_path / "closed")["target_rate_rps"] is None


@pytest.mark.slow
def test_two_worker_run_records_exactly_what_the_server_saw(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "4")
    out = tmp_path / "burst"
    result = run_loadgen(
        "--target",
        server.url,
        "--profile",
        "burst",
        "--out",
        str(out),
        "--duration",
        "2",
        "--rate",
        "40",
        "--workers",
        "2",
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    records, load = read_records(out), read_load(out)
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == server.stats()["requests_total"] == load["sent_requests"]
    assert {r["worker"] for r in records} == {0, 1}
    assert {r["stage"] for r in records} == {"baseline", "spike", "recovery"}
    assert load["workers"] == 2 and validate_load_json(load) == []
    assert abs(load["achieved_rate_rps"] - 40) / 40 < 0.4  # ~60 Poisson arrivals


@pytest.mark.slow
def test_ctrl_c_keeps_finished_records_and_marks_load_interrupted(fake_server, tmp_path) -> None:
    server = fake_server(
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
        "--tokens",
        "2",
        "--fault",
        "hang",
        "--fault-every",
        "3",
        "--hang-s",
        "30",
    )
    out = tmp_path / "steady"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--target",
            server.url,
            "--profile",
            "steady",
            "--out",
            str(out),
            "--duration",
            "30",
            "--rate",
            "20",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while server.stats()["requests_total"] < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 5, stderr
    records, load = read_records(out), read_load(out)
    assert load["ended"] == "interrupted" and validate_load_json(load) == []
    assert all(validate_record(r) == [] for r in records)
    statuses = {r["status"] for r in records}
    assert statuses == {"ok", "cancelled"}, statuses
    assert len(records) == load["sent_requests"] >= 12
    assert json.dumps(load)  # serialisable as written
