"""Helpers for the Batch API tests: servers on port 0 with a data directory, JSONL inputs, the
`openai` client, and bounded waits for a job to end."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_SECONDS = 180.0
END_STATUSES = ("completed", "failed", "expired", "cancelled")
BASE_ARGS = ["--device", "cpu", "--max-model-len", "512", "--max-tokens-cap", "256",
             "--log-level", "info"]  # fmt: skip


@dataclass
class BatchServer:
    process: subprocess.Popen[bytes]
    port_file: Path
    log_path: Path
    data_dir: Path
    base_url: str = ""

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-6000:]

    def wait_ready(self) -> BatchServer:
        if self.base_url:
            return self
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    pytest.fail(f"server exited ({self.process.returncode}):\n{self.log()}")
                text = self.port_file.read_text().strip() if self.port_file.exists() else ""
                if text:
                    url = f"http://127.0.0.1:{int(text)}"
                    try:
                        if http.get(f"{url}/health").status_code == 200:
                            self.base_url = url
                            return self
                    except httpx.TransportError:
                        pass
                time.sleep(0.05)
        pytest.fail(f"server not ready in {START_TIMEOUT_SECONDS} s:\n{self.log()}")

    def client(self) -> Any:
        from openai import OpenAI

        return OpenAI(base_url=f"{self.wait_ready().base_url}/v1", api_key="unused", timeout=60)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def launch(workdir: Path, extra: list[str], *, data_dir: Path | None = None) -> BatchServer:
    """A server on port 0 with `--data-dir` (workdir/data unless given); not waited for."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir or workdir / "data"
    port_file, log_path = workdir / "port", workdir / "server.log"
    port_file.unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", "0", "--port-file",
             str(port_file), "--data-dir", str(data_dir), *BASE_ARGS, *extra],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    return BatchServer(process=process, port_file=port_file, log_path=log_path, data_dir=data_dir)


def line(custom_id: str, body: dict[str, Any], url: str = "/v1/completions") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def completion_lines(count: int, *, max_tokens: int, prefix: str = "r") -> list[str]:
    return [
        line(f"{prefix}{i}", {"prompt": f"line {i}", "max_tokens": max_tokens, "seed": i,
                              "ignore_eos": True})
        for i in range(count)
    ]  # fmt: skip


def upload(client: Any, lines: list[str], name: str = "input.jsonl") -> Any:
    data = ("\n".join(lines) + "\n").encode()
    return client.files.create(file=(name, io.BytesIO(data)), purpose="batch")


def wait_batch(
    client: Any, batch_id: str, *, statuses: tuple[str, ...] = END_STATUSES,
    timeout_seconds: float = 180.0, until: Any = None,
) -> Any:  # fmt: skip
    """Poll until the job's status is one of `statuses` (or `until(batch)` holds)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses or (until is not None and until(batch)):
            return batch
        if time.monotonic() > deadline:
            pytest.fail(f"batch {batch_id} still {batch.status} ({batch.request_counts})")
        time.sleep(0.05)


def results(client: Any, batch: Any) -> tuple[list[dict], list[dict]]:
    """(output lines, error lines) of a finished job, decoded."""

    def read(file_id: str | None) -> list[dict]:
        if file_id is None:
            return []
        text = client.files.content(file_id).text
        return [json.loads(row) for row in text.splitlines() if row]

    return read(batch.output_file_id), read(batch.error_file_id)
