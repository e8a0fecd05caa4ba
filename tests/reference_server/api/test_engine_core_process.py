"""The engine core runs in a child process: the server's behaviour across that boundary.

Each test starts its own server (these tests kill processes) with the tiny CPU model on port 0.
A dead engine core must never leave a half-alive server: /health turns 503 within a second,
streams in flight end with an error event, and the server exits non-zero. A dead API process
must not leave an orphaned core.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import COMMON_ARGS, ServerProcess, launch
from server_testlib import parse_sse, wait_until

pytestmark = pytest.mark.slow


def _core_of(server: ServerProcess) -> psutil.Process:
    children = psutil.Process(server.process.pid).children()
    # spawn also starts multiprocessing's resource tracker beside the core.
    cores = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
    assert len(cores) == 1, f"expected one engine core child, got {children}"
    return cores[0]


def launch_command(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "reference_server", "--port", "0",
            "--port-file", str(workdir / "port"), "--log-level", "warning"]  # fmt: skip


@contextlib.contextmanager
def _running(tmp_path: Path, *extra: str) -> Iterator[ServerProcess]:
    """A server that is stopped (killed if need be) whatever the test does: these tests kill
    processes, and one left running would outlive the session."""
    server = launch("core", [*COMMON_ARGS, *extra], tmp_path / "server")
    try:
        yield server.wait_ready()
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=30)


def test_a_killed_engine_core_fails_streams_turns_health_503_and_exits_non_zero(tmp_path):
    with _running(tmp_path) as server:
        _kill_the_core_mid_stream(server)


def _kill_the_core_mid_stream(server: ServerProcess) -> None:
    core = _core_of(server)
    events: list = []
    started = threading.Event()

    def stream() -> None:
        body = {"prompt": "long", "max_tokens": 256, "stream": True, "ignore_eos": True}
        with (
            httpx.Client(base_url=server.base_url, timeout=60) as http,
            http.stream("POST", "/v1/completions", json=body) as response,
        ):
            lines = []
            for line in response.iter_lines():
                lines.append(line)
                if line:
                    started.set()
            events.extend(parse_sse(lines))

    reader = threading.Thread(target=stream)
    reader.start()
    assert started.wait(60), "the stream never started"
    core.kill()
    killed_at = time.monotonic()
    first_503 = None
    with httpx.Client(base_url=server.base_url, timeout=2.0) as http:
        while time.monotonic() - killed_at < 10.0:
            try:
                if http.get("/health").status_code == 503:
                    first_503 = time.monotonic() - killed_at
                    break
            except httpx.TransportError:
                break  # already exited: the exit code below says whether that was right
            time.sleep(0.02)
    reader.join(30)
    assert server.process.wait(timeout=30) != 0
    if first_503 is not None:
        assert first_503 < 1.0, f"/health took {first_503:.2f} s to turn 503"
    assert events and events[-1] == "[DONE]", events[-3:]
    error = events[-2]["error"]
    assert error["code"] == "engine_dead" and "killed by signal 9" in error["message"]
    assert "engine core died" in server.log()


def test_sigterm_stops_the_core_too_and_exits_0(tmp_path):
    with _running(tmp_path) as server:
        core = _core_of(server)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    assert wait_until(lambda: not core.is_running(), timeout_seconds=10)


def test_a_killed_api_process_leaves_no_orphaned_core(tmp_path):
    with _running(tmp_path) as server:
        core = _core_of(server)
        server.process.kill()
        server.process.wait(timeout=10)
    # The core notices the pipe's end-of-file, idle or stepping.
    assert wait_until(lambda: not core.is_running(), timeout_seconds=10)


def test_a_model_limit_the_core_checks_names_the_flag_and_exits_2(tmp_path):
    workdir = tmp_path / "bad"
    workdir.mkdir()
    result = subprocess.run(
        [*launch_command(workdir), "--device", "cpu", "--max-model-len", "1000000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--max-model-len" in result.stderr
    assert "Traceback" not in result.stderr


def test_engine_core_thread_serves_inside_the_api_process(tmp_path):
    with _running(tmp_path, "--engine-core", "thread") as server:
        assert psutil.Process(server.process.pid).children() == []
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            body = {"prompt": "hi", "max_tokens": 4, "ignore_eos": True}
            response = http.post("/v1/completions", json=body)
            assert response.status_code == 200
            assert response.json()["usage"]["completion_tokens"] == 4
            # Streamed, the step thread's outputs reach the loop's token sinks: the same text.
            body = {"prompt": "hi", "max_tokens": 48, "ignore_eos": True, "seed": 3,
                    "temperature": 1.0}  # fmt: skip
            whole = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
            with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as stream:
                events = parse_sse(stream.iter_lines())
            assert events[-1] == "[DONE]"
            assert "".join(e["choices"][0]["text"] for e in events[:-1]) == whole
        assert server.stop() == 0
