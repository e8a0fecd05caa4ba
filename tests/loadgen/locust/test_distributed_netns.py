"""Distributed load across two hosts: a master and its workers in two network namespaces.

The test makes two namespaces joined by a veth pair (its own addresses, nothing routed outside
them). The master and the target (the fake OpenAI server) live in the first; one worker joins
from each namespace over the veth addresses, so the second worker really is on another host as
far as the network is concerned: it reaches the master and the target only through the link.
Every planned request must reach the server exactly once and be recorded once at the master,
with the schedule split over the two workers.

Needs root and iproute2 (`ip netns`); skipped otherwise, with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lg_support import FAKE, REPO, read_load, read_records

from loadgen.plan import build_plan
from loadgen.profiles import resolve

pytestmark = pytest.mark.slow

PROFILE = "burst"
DURATION, RATE = "2", "30"
# Link-local-style private addresses that exist only inside the test's two namespaces.
MASTER_ADDR, WORKER_ADDR = "10.231.17.1", "10.231.17.2"
MASTER_PORT, SERVER_PORT = 5557, 8123


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def _netns_usable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str]]:
    why = _netns_usable()
    if why is not None:
        pytest.skip(why)
    tag = f"{os.getpid() % 100000}"
    master_ns, worker_ns = f"bgm{tag}", f"bgw{tag}"
    veth_m, veth_w = f"bgvm{tag}", f"bgvw{tag}"
    made: list[str] = []
    try:
        for ns in (master_ns, worker_ns):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip(
            "link",
            "add",
            veth_m,
            "netns",
            master_ns,
            "type",
            "veth",
            "peer",
            "name",
            veth_w,
            "netns",
            worker_ns,
        )
        for ns, dev, addr in ((master_ns, veth_m, MASTER_ADDR), (worker_ns, veth_w, WORKER_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
    except subprocess.CalledProcessError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {exc.stderr.strip()}")
    try:
        yield master_ns, worker_ns
    finally:
        for ns in made:  # deleting a namespace kills its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def _in(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _get_json(ns: str, url: str) -> dict:  # type: ignore[type-arg]
    """GET from inside a namespace (this process lives outside both)."""
    code = (
        "import json, sys, urllib.request;"
        "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    )
    done = subprocess.run(
        _in(ns, sys.executable, "-c", code, url), capture_output=True, text=True, timeout=20
    )
    if done.returncode != 0:
        raise OSError(done.stderr.strip()[-300:])
    return json.loads(done.stdout)


def _wait_healthy(ns: str, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "fake server exited"
        try:
            if _get_json(ns, url + "/health").get("status") == "ok":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"fake server in {ns} never became healthy")


def test_master_and_worker_on_two_hosts_record_every_request_once(
    two_hosts: tuple[str, str], tmp_path: Path
) -> None:
    master_ns, worker_ns = two_hosts
    target = f"http://{MASTER_ADDR}:{SERVER_PORT}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        _in(
            master_ns,
            sys.executable,
            str(FAKE),
            "--host",
            MASTER_ADDR,
            "--port",
            str(SERVER_PORT),
            "--ttft-ms",
            "5",
            "--itl-ms",
            "1",
            "--tokens",
            "4",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        _wait_healthy(master_ns, target, server)
        # The worker namespace reaches the target only over the veth link.
        assert _get_json(worker_ns, target + "/health")["status"] == "ok"
        out = tmp_path / PROFILE
        master_log = open(tmp_path / "master.log", "w")  # noqa: SIM115
        logs.append(master_log)
        master = subprocess.Popen(
            _in(
                master_ns,
                sys.executable,
                "-m",
                "loadgen",
                "--target",
                target,
                "--profile",
                PROFILE,
                "--out",
                str(out),
                "--duration",
                DURATION,
                "--rate",
                RATE,
                "--workers",
                "2",
                "--remote-workers",
                "--master-bind-host",
                MASTER_ADDR,
                "--master-port",
                str(MASTER_PORT),
            ),
            cwd=REPO,
            env=env,
            stdout=master_log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        procs.append(master)
        for i, ns in enumerate((master_ns, worker_ns)):
            log = open(tmp_path / f"worker{i}.log", "w")  # noqa: SIM115
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    _in(
                        ns,
                        sys.executable,
                        "-m",
                        "loadgen.worker",
                        "--master-host",
                        MASTER_ADDR,
                        "--master-port",
                        str(MASTER_PORT),
                    ),
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        rc = master.wait(timeout=120)
        master_text = (tmp_path / "master.log").read_text()
        assert rc == 0, master_text[-3000:]

        planned = len(build_plan(resolve(PROFILE, {"duration_seconds": 2.0, "rate_rps": 30.0})))
        records, load = read_records(out), read_load(out)
        seen = _get_json(master_ns, target + "/stats")["requests_total"]
        ids = [r["id"] for r in records]
        assert len(ids) == len(set(ids)) == seen == planned
        assert load["planned_requests"] == load["sent_requests"] == planned
        assert load["workers"] == 2 and load["ended"] == "completed"
        # The schedule is split: both workers sent their share, the remote one included.
        by_worker = {w: sum(1 for r in records if r["worker"] == w) for w in (0, 1)}
        assert all(n > 0 for n in by_worker.values()), by_worker
        assert sum(by_worker.values()) == planned
        assert all(r["status"] == "ok" for r in records)
    finally:
        for proc in [*procs, server]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for log in logs:
            log.close()
