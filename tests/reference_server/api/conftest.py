"""Real reference servers for the HTTP tests: subprocesses on port 0, waited for by polling.

Each server is launched with `--port 0 --port-file`, then /health is polled (bounded loops, no
fixed sleeps). All servers are launched together on first use so their start-up (torch import,
model build) overlaps; each test module then waits only for the one it needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from server_testlib import ADMIN_TOKEN, API_KEY

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_SECONDS = 120.0

# Small limits keep every test request cheap on a busy 2-core machine.
COMMON_ARGS = ["--device", "cpu", "--max-model-len", "512", "--max-tokens-cap", "256"]
SERVER_ARGS: dict[str, list[str]] = {
    "open": [*COMMON_ARGS, "--default-max-tokens", "16", "--step-log-size", "64"],
    # Also the server the SIGTERM test stops (hence the long context and the 2 s drain).
    "secured": [
        "--device", "cpu", "--max-model-len", "4096", "--max-tokens-cap", "4000",
        "--api-key", API_KEY, "--admin-token", ADMIN_TOKEN, "--max-body-bytes", "2048",
        "--drain-timeout-seconds", "2.0",
    ],
}  # fmt: skip


@dataclass
class ServerProcess:
    name: str
    process: subprocess.Popen[bytes]
    port_file: Path
    log_path: Path
    port: int | None = None
    ready: bool = False
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        assert self.port is not None, "server not ready"
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def wait_ready(self, timeout_seconds: float = START_TIMEOUT_SECONDS) -> ServerProcess:
        if self.ready:
            return self
        deadline = time.monotonic() + timeout_seconds
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    pytest.fail(
                        f"server {self.name} exited ({self.process.returncode}):\n{self.log()}"
                    )
                if self.port is None and self.port_file.exists():
                    text = self.port_file.read_text().strip()
                    self.port = int(text) if text else None
                if self.port is not None:
                    try:
                        if client.get(f"{self.base_url}/health").status_code == 200:
                            self.ready = True
                            return self
                    except httpx.TransportError:
                        pass
                time.sleep(0.05)
        pytest.fail(f"server {self.name} not ready in {timeout_seconds} s:\n{self.log()}")

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def launch(name: str, args: list[str], workdir: Path) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    port_file = workdir / "port"
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "reference_server", "--port", "0",
                "--port-file", str(port_file), "--log-level", "warning", *args,
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            # One torch thread each: three servers share a small machine with the tests.
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    return ServerProcess(name=name, process=process, port_file=port_file, log_path=log_path)


@pytest.fixture(scope="session")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    base = tmp_path_factory.mktemp("servers")
    servers = {name: launch(name, args, base / name) for name, args in SERVER_ARGS.items()}
    yield servers
    for server in servers.values():
        server.terminate()
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="session")
def server(launched: dict[str, ServerProcess]) -> ServerProcess:
    """No auth, small limits, a 64-record step log."""
    return launched["open"].wait_ready()


@pytest.fixture
def secured_server(
    launched: dict[str, ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    """--api-key, --admin-token, a 2048-byte body limit and a 2 s drain timeout. The SIGTERM
    test stops it; a test that runs after that (unusual order) gets a fresh one."""
    if launched["secured"].process.poll() is not None:
        workdir = tmp_path_factory.mktemp("secured-again")
        launched["secured"] = launch("secured", SERVER_ARGS["secured"], workdir)
    return launched["secured"].wait_ready()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        yield http
