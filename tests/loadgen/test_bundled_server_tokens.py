"""The client against the real bundled server: `continuous_usage: auto` recognises it, and with
continuous usage stats every streamed chunk's token count is real (the chunks add up to the
server's own `usage.completion_tokens`, chunks holding back part of a UTF-8 character included).
The server runs as a subprocess on port 0, waited for by polling /health."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from lg_support import REPO

from loadgen.client import ClientConfig, OpenAIClient
from loadgen.httpconn import parse_target
from loadgen.plan import PlannedRequest
from loadgen.probe import probe_continuous_usage, probe_target
from loadgen.records import RequestRecord, validate_record

pytestmark = pytest.mark.slow

_START_TIMEOUT_SECONDS = 120.0


@pytest.fixture(scope="module")
def bundled_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("bundled")
    port_file, log_path = workdir / "port", workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", "0", "--port-file",
             str(port_file), "--device", "cpu", "--max-model-len", "512",
             "--log-level", "warning"],
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


def _stream(url: str, endpoint: str, max_tokens: int) -> dict:
    client = OpenAIClient(
        parse_target(url),
        ClientConfig(
            model=probe_target(url, api_key=None, timeout_seconds=10) or "default",
            endpoint=endpoint,
            continuous_usage=True,
            extra_body={"ignore_eos": True},  # exactly max_tokens, no stop token without text
        ),
    )
    request = PlannedRequest(
        index=0,
        offset_seconds=0.0,
        stage="main",
        priority="interactive",
        length_class="short",
        messages=(("user", "Tell me a story about a cat."),),
        prompt_tokens=28,
        max_tokens=max_tokens,
    )
    record = RequestRecord(
        id="0-0",
        profile="t",
        stage="main",
        priority="interactive",
        length_class="short",
        endpoint=endpoint,
        stream=True,
        max_tokens=max_tokens,
        planned_at=time.monotonic(),
    )
    try:
        out = client.send(request, record).to_dict()
    finally:
        client.close()
    assert validate_record(out) == []
    return out


def test_auto_recognises_the_bundled_server(bundled_url: str) -> None:
    assert probe_continuous_usage(bundled_url, api_key=None, timeout_seconds=10) is True


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_chunks_add_up_to_the_servers_completion_tokens(
    bundled_url: str, endpoint: str
) -> None:
    rec = _stream(bundled_url, endpoint, max_tokens=48)
    assert rec["status"] == "ok", rec["error"]
    assert rec["chunk_tokens_source"] == "usage"
    assert rec["tokens_source"] == "usage"
    assert sum(rec["chunk_tokens"]) == rec["output_tokens"] == 48
    assert all(k >= 1 for k in rec["chunk_tokens"])
