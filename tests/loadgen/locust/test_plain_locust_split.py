"""Plain `locust -f loadgen/locustfile.py -u N`: the schedule is split over the N users, sent once.

Every planned request reaches the (fake) server exactly once whatever `-u` is, in one process or
over Locust workers; requests.jsonl has every record once, load.json and Locust's own stats (CSV
and `--json-file`) count the same requests; a split that cannot be exact is refused with exit
code 2 and sends nothing. Real processes on loopback; the expected count is the plan's own.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_support import REPO, read_load, read_records

from loadgen.plan import build_plan
from loadgen.profiles import resolve

PROFILE = "burst"
OVERRIDES = {"duration_seconds": 1.5, "rate_rps": 16}
LOCUST = [sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py"]


def _planned() -> int:
    return len(build_plan(resolve(PROFILE, OVERRIDES, "smoke")))


def _load_args(url: str, out: Path, stats: Path, users: int, rate: int) -> list[str]:
    return [
        "--headless",
        "-u",
        str(users),
        "-r",
        str(rate),
        "--host",
        url,
        "--loadgen-profile",
        PROFILE,
        "--loadgen-overrides-json",
        json.dumps(OVERRIDES),
        "--loadgen-out",
        str(out),
        "--csv",
        str(stats),
        "--json-file",
        str(stats),
        "--only-summary",
    ]


def _locust_counts(stats: Path, request_type: str) -> tuple[int, int]:
    """Request counts of one request type in Locust's stats CSV and in its --json-file."""
    with open(f"{stats}_stats.csv", newline="") as f:
        in_csv = sum(
            int(row["Request Count"]) for row in csv.DictReader(f) if row["Type"] == request_type
        )
    entries = json.loads(Path(f"{stats}.json").read_text())
    in_json = sum(e["num_requests"] for e in entries if e["method"] == request_type)
    return in_csv, in_json


def _assert_sent_once(server: Any, out: Path, stats: Path, users: int) -> None:
    planned = _planned()
    records, load = read_records(out), read_load(out)
    assert server.stats()["requests_total"] == planned
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == planned
    # Slot s of N sends arrivals s, s + N, ...: every arrival once, from its own slot.
    indexes = sorted(int(i.split("-")[1]) for i in ids)
    assert indexes == list(range(planned))
    assert all(int(r["id"].split("-")[0]) == int(r["id"].split("-")[1]) % users for r in records)
    assert {r["worker"] for r in records} == set(range(users))
    assert all(r["status"] == "ok" for r in records)
    assert load["ended"] == "completed" and load["workers"] == users
    assert load["planned_requests"] == load["sent_requests"] == planned
    assert sum(load["counts_by_status"].values()) == planned
    # Each user starts its share on time, however late Locust spawned it (-r below -u): a user
    # that started its share when spawned would lag >= 1.5 s (-u 4 -r 2); a loaded machine's
    # late wake-ups stay well under 1 s.
    assert load["schedule_lag_seconds"]["max"] < 1.0, load["schedule_lag_seconds"]
    assert _locust_counts(stats, "E2E") == (planned, planned)
    assert _locust_counts(stats, "TTFT") == (planned, planned)


@pytest.mark.slow
@pytest.mark.parametrize(("users", "rate"), [(1, 1), (4, 2)])
def test_plain_locust_splits_the_schedule_over_the_users_in_one_process(
    fake_server, tmp_path, users: int, rate: int
) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
    out, stats = tmp_path / "out", tmp_path / "locust"
    result = subprocess.run(
        [*LOCUST, *_load_args(server.url, out, stats, users, rate)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_sent_once(server, out, stats, users)


@pytest.mark.slow
def test_plain_locust_refuses_a_run_without_users(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
    out, stats = tmp_path / "out", tmp_path / "locust"
    result = subprocess.run(
        [*LOCUST, *_load_args(server.url, out, stats, 0, 1)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "loadgen: refused: no user to send the schedule" in result.stderr
    assert server.stats()["requests_total"] == 0 and not (out / "load.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_distributed(
    server: Any, tmp_path: Path, users: int, workers: int
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    out, stats = tmp_path / "out", tmp_path / "locust"
    port = _free_port()
    master = subprocess.Popen(
        [
            *LOCUST,
            *_load_args(server.url, out, stats, users, users),
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            "60",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    logs = [open(tmp_path / f"worker{i}.log", "w") for i in range(workers)]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for log in logs
    ]
    try:
        stdout, stderr = master.communicate(timeout=120)
        for proc in procs:
            proc.wait(timeout=30)
    finally:
        for proc in [master, *procs]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    return subprocess.CompletedProcess(master.args, master.returncode, stdout, stderr), out, stats


@pytest.mark.slow
def test_plain_locust_master_splits_the_schedule_over_all_users_of_all_workers(
    fake_server, tmp_path
) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
    result, out, stats = _run_distributed(server, tmp_path, users=4, workers=2)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_sent_once(server, out, stats, users=4)


@pytest.mark.slow
def test_plain_locust_master_refuses_users_that_do_not_split_evenly_over_workers(
    fake_server, tmp_path
) -> None:
    server = fake_server("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "3")
    result, out, _ = _run_distributed(server, tmp_path, users=3, workers=2)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "-u 3 cannot be split evenly over 2 workers" in result.stderr
    assert server.stats()["requests_total"] == 0 and not (out / "load.json").exists()
