"""Helpers for loadgen tests: the fake OpenAI server as a process, loadgen runs, record files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_openai_server.py")


class FakeServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def control(self, **changes: Any) -> Any:
        req = urllib.request.Request(
            self.url + "/control", data=json.dumps(changes).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        return self.get("/stats")


def start_fake_server(tmp_path: Path, args: list[str]) -> FakeServer:
    port_file = tmp_path / f"fake-port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", "0", "--port-file", str(port_file), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake server exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        if port_file.exists():
            server = FakeServer(proc, int(port_file.read_text()))
            try:
                if server.get("/health")["status"] == "ok":
                    return server
            except OSError:
                pass
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError("fake server did not become healthy within 20 s")


def stop_fake_server(server: FakeServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    server.proc.stderr.close()  # type: ignore[union-attr]


def run_loadgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def read_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_load(out: Path) -> dict[str, Any]:
    return json.loads((out / "load.json").read_text())
