"""Helpers of the gate-under-faults tests: a short absolute-rate suite against a `FaultTarget`,
the descendants a run started (to prove none outlives it), and `batchgate check` reproducing
the verdicts of a run from what it wrote.

The suite needs no calibration (`--calibration off`, absolute rates), so each case costs the
length of its profile, not a capacity probe. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]

# steady at 4 req/s for 12 s: ~48 requests, each streaming 24 tokens in ~0.5 s. A stalled
# stream gives up after 3 s (request_timeout_seconds), so a stall case ends in seconds too.
GATES_YAML = """\
version: 1
settings: {confidence: 0.95, inconclusive: fail}
profiles:
  steady:
    rate_rps: 4
    duration_seconds: 12
    warmup_seconds: 0
    output_tokens: {kind: fixed, value: 24}
    request_timeout_seconds: 3
    max_schedule_lag_p99_seconds: 5.0
gates:
  - name: no_errors
    metric: errors
    statistic: count
    fail: "== 0"
  - name: ttft_p50
    metric: ttft
    statistic: p50
    fail: "< 2s"
"""


def write_gates(directory: Path) -> Path:
    path = directory / "gates.yaml"
    path.write_text(GATES_YAML, encoding="utf-8")
    return path


def run_argv(url: str, gates: Path, out: Path, run_id: str, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "gate.cli", "run", "--target", url),
        *("--calibration", "off", "--gates", str(gates), "--scale", "smoke"),
        *("--out", str(out), "--run-id", run_id, *extra),
    ]


def run_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GITHUB_ACTIONS", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


@dataclass
class Descendants:
    """Every process below `root` seen while the run lasts (pid and start time: no pid reuse)."""

    root: int
    seen: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Descendants:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.snapshot()
            self._stop.wait(0.1)

    def snapshot(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.root).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    self.seen.setdefault(child.pid, child.create_time())
                    self.names.setdefault(child.pid, " ".join(child.cmdline())[:160])

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def alive(self) -> list[str]:
        left = []
        for pid, created in self.seen.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid}: {self.names.get(pid, '?')}")
        return left

    def assert_all_gone(self, timeout_seconds: float = 15.0) -> None:
        self.stop()
        deadline = time.monotonic() + timeout_seconds
        left = self.alive()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.alive()
        assert not left, f"processes left behind: {left}"
        assert self.seen, "no child process was ever seen: the test watched nothing"


def wait_for_lines(path: Path, lines: int, timeout_seconds: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= lines:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not get {lines} lines within {timeout_seconds:g} s")


def find_descendant(root: int, needle: str, timeout_seconds: float = 30.0) -> psutil.Process:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(root).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    if needle in " ".join(child.cmdline()):
                        return child
        time.sleep(0.05)
    raise AssertionError(f"no descendant of {root} runs {needle!r}")


def statuses(run_dir: Path) -> dict[str, str]:
    data = json.loads((run_dir / "verdicts.json").read_text(encoding="utf-8"))
    return {v["id"]: v["status"] for v in data["verdicts"]}


def check(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", "check", str(run_dir), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=run_env(),
    )


def records(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a requests.jsonl (a line cut by the fault is not a record)."""
    out = []
    for line in path.read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            out.append(json.loads(line))
    return out


def kill(proc: psutil.Process | subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
        proc.send_signal(signal.SIGKILL)
