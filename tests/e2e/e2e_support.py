"""Helpers of the end-to-end tests: run `batchgate` as a child process, find its children.

Runs use `--scale smoke` and the repository's gates.yaml; every helper has a deadline, and
`assert_no_strays` checks that nothing a run started outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from process_scan import processes_mentioning

REPO = Path(__file__).resolve().parents[2]
GATES = REPO / "gate" / "gates" / "default.yaml"
FAKE_OPENAI = REPO / "tests" / "loadgen" / "fake_openai_server.py"
RUN_TIMEOUT_SECONDS = 240.0


@dataclass(frozen=True)
class Finished:
    code: int
    stdout: str
    stderr: str
    run_dir: Path


def batchgate_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gate.cli", *args]


def ctrl_c_as_default() -> None:
    """preexec_fn: give the child Ctrl-C back. A test process started from a non-interactive
    shell's background job (`cmd &` in a script, nohup) has SIGINT ignored, children inherit
    that, and Python then installs no KeyboardInterrupt handler: a Ctrl-C test would see the
    run go on to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(out: Path, run_id: str, *args: str) -> subprocess.Popen[str]:
    argv = batchgate_argv(
        "run",
        "--gates",
        str(GATES),
        "--scale",
        "smoke",
        "--out",
        str(out),
        "--run-id",
        run_id,
        *args,
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GITHUB_ACTIONS", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_as_default,
    )


def finish(
    proc: subprocess.Popen[str], run_dir: Path, timeout_seconds: float = RUN_TIMEOUT_SECONDS
) -> Finished:
    try:
        stdout, stderr = proc.communicate(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
        raise AssertionError(
            f"batchgate run did not finish in {timeout_seconds:g} s\n{stderr}"
        ) from None
    return Finished(code=proc.returncode, stdout=stdout, stderr=stderr, run_dir=run_dir)


def run_batchgate(out: Path, run_id: str, *args: str) -> Finished:
    return finish(start_run(out, run_id, *args), out / run_id)


def kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)


def assert_no_strays(run_dir: Path, timeout_seconds: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    strays = processes_mentioning(str(run_dir))
    while strays and time.monotonic() < deadline:
        time.sleep(0.2)
        strays = processes_mentioning(str(run_dir))
    assert not strays, [" ".join(p.cmdline()) for p in strays]


def wait_for_child(parent_pid: int, needle: str, timeout_seconds: float) -> psutil.Process:
    """The first descendant of `parent_pid` whose command line contains `needle`."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            for child in psutil.Process(parent_pid).children(recursive=True):
                try:
                    if needle in " ".join(child.cmdline()):
                        return child
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    raise AssertionError(f"no child process running {needle!r} within {timeout_seconds:g} s")


def wait_for_file(path: Path, timeout_seconds: float, *, min_lines: int = 1) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= min_lines:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not get {min_lines} line(s) within {timeout_seconds:g} s")


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def verdict(verdicts: dict[str, Any], gate_id: str) -> dict[str, Any]:
    for item in verdicts["verdicts"]:
        if item["id"] == gate_id:
            return item
    raise AssertionError(f"no verdict {gate_id!r} in {[v['id'] for v in verdicts['verdicts']]}")


@contextlib.contextmanager
def served(argv: list[str], port_file: Path, *, start_timeout_seconds: float) -> Iterator[str]:
    """A server started with `--port 0 --port-file F` (in `argv`): its URL once `/health`
    answers 200; stopped (SIGTERM, then SIGKILL) when the block ends."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + start_timeout_seconds
        url = None
        while url is None:
            assert proc.poll() is None, f"server exited with code {proc.returncode}: {argv}"
            assert time.monotonic() < deadline, f"server not healthy in time: {argv}"
            port = port_file.read_text().strip() if port_file.exists() else ""
            if port:
                with contextlib.suppress(httpx.HTTPError):
                    candidate = f"http://127.0.0.1:{port}"
                    if httpx.get(candidate + "/health", timeout=2).status_code == 200:
                        url = candidate
            if url is None:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bundled_server(tmp_path: Path) -> contextlib.AbstractContextManager[str]:
    """The reference server with its defaults (the model loads in tens of seconds on a busy
    core: a generous start deadline)."""
    port_file = tmp_path / "port"
    argv = [sys.executable, "-m", "reference_server", "--port", "0", "--port-file", str(port_file)]
    return served(argv, port_file, start_timeout_seconds=120)


def fake_openai_server(tmp_path: Path, *flags: str) -> contextlib.AbstractContextManager[str]:
    """tests/loadgen/fake_openai_server.py with `flags` (a plain OpenAI-compatible target)."""
    port_file = tmp_path / "fake-port"
    argv = [sys.executable, str(FAKE_OPENAI), "--port", "0", "--port-file", str(port_file), *flags]
    return served(argv, port_file, start_timeout_seconds=30)
