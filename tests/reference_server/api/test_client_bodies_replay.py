"""Replays the exact requests real client tools sent (guidellm, AIPerf, inference-perf, the openai
SDK, plain Locust with loadgen's locustfile) and checks the answers are what those tools parse.

The bodies were captured with `python -m benchmarks.bench_clients --capture` (a logging proxy in
front of the server; each fixture names the tool, its version and the command), so CI needs none
of the tools installed. Every body is sent byte for byte with the headers the tool sent, to a
real server on port 0 with the server's default limits (AIPerf's default prompt is ~550 tokens,
more than the shared test servers' 512-token context); an answer must be 200 and either a
well-formed event stream ending in `[DONE]` or one JSON body, with usage consistent with the
request.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_testlib import parse_sse

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).parent / "fixtures" / "client_bodies"
TOOLS = ("guidellm", "aiperf", "inference-perf", "openai-sdk", "locust")
# Bodies without an output limit get this many tokens (the capture server's default was 256;
# fewer keep the replay cheap, and the limit is what the usage checks compare with).
SERVER_DEFAULT_MAX_TOKENS = 16
START_TIMEOUT_SECONDS = 120.0


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    workdir = tmp_path_factory.mktemp("client-bodies")
    port_file, log_path = workdir / "port", workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", "0", "--port-file",
             str(port_file), "--device", "cpu", "--log-level", "warning",
             "--default-max-tokens", str(SERVER_DEFAULT_MAX_TOKENS)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    try:
        base_url = _wait_ready(process, port_file, log_path)
        with httpx.Client(base_url=base_url, timeout=60.0) as http:
            yield http
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_ready(process: subprocess.Popen[bytes], port_file: Path, log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"server exited ({process.returncode}):\n{log_path.read_text()}")
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                base_url = f"http://127.0.0.1:{int(text)}"
                try:
                    if http.get(f"{base_url}/health").status_code == 200:
                        return base_url
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
    pytest.fail(f"server not ready in {START_TIMEOUT_SECONDS} s:\n{log_path.read_text()}")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


CAPTURED = sorted(FIXTURES.glob("*.json"))
POSTS = [p for p in CAPTURED if _load(p)["method"] == "POST"]
OTHERS = [p for p in CAPTURED if _load(p)["method"] != "POST"]  # health, models, metrics


def _send(client: httpx.Client, fixture: dict[str, Any]) -> httpx.Response:
    request = client.build_request(
        fixture["method"],
        fixture["path"],
        headers=fixture["headers"],
        content=fixture["body_text"].encode("utf-8", errors="surrogateescape") or None,
    )
    return client.send(request, stream=True)


def _limit(body: dict[str, Any]) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        if body.get(name) is not None:
            return int(body[name])
    return max(SERVER_DEFAULT_MAX_TOKENS, int(body.get("min_tokens") or 0))


def _prompt_tokens(client: httpx.Client, path: str, body: dict[str, Any]) -> int:
    if path.endswith("/chat/completions"):
        ask = {"messages": body["messages"]}
    else:
        prompt = body["prompt"]
        prompt = prompt[0] if isinstance(prompt, list) and len(prompt) == 1 else prompt
        if isinstance(prompt, list):  # token ids: counted as given
            return len(prompt) + 0
        ask = {"prompt": prompt, "add_special_tokens": body.get("add_special_tokens", True)}
    answer = client.post("/tokenize", json=ask)
    assert answer.status_code == 200, answer.text
    return answer.json()["count"]


def _check_usage(usage: dict[str, Any], body: dict[str, Any], prompt_tokens: int) -> None:
    assert usage["prompt_tokens"] == prompt_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    limit = _limit(body)
    assert 1 <= usage["completion_tokens"] <= limit
    if body.get("ignore_eos"):
        assert usage["completion_tokens"] == limit
    if body.get("min_tokens"):
        assert usage["completion_tokens"] >= body["min_tokens"]


def _text_of(choice: dict[str, Any], chat: bool) -> str:
    if chat:
        return (choice.get("delta") or choice.get("message") or {}).get("content") or ""
    return choice.get("text") or ""


def test_every_client_tool_has_captured_bodies():
    tools = {_load(p)["tool"] for p in POSTS}
    assert set(TOOLS) <= tools, f"no captured bodies for {set(TOOLS) - tools}"
    for path in CAPTURED:
        fixture = _load(path)
        assert fixture["version"] and fixture["command"], path.name
        assert path.name.startswith(f"{fixture['tool']}-{fixture['version']}-"), path.name


@pytest.mark.parametrize("fixture_path", POSTS, ids=lambda p: p.stem)
def test_captured_client_request_gets_200_and_an_openai_answer(client, fixture_path):
    fixture = _load(fixture_path)
    body = json.loads(fixture["body_text"])
    chat = fixture["path"].endswith("/chat/completions")
    response = _send(client, fixture)
    try:
        payload = b"".join(response.iter_bytes()).decode("utf-8")
    finally:
        response.close()
    assert response.status_code == 200, payload
    prompt_tokens = _prompt_tokens(client, fixture["path"], body)
    if not body.get("stream"):
        assert response.headers["content-type"].startswith("application/json")
        answer = json.loads(payload)
        assert answer["object"] == ("chat.completion" if chat else "text_completion")
        (choice,) = answer["choices"]
        assert choice["finish_reason"] in ("length", "stop")
        assert isinstance(_text_of(choice, chat), str)
        _check_usage(answer["usage"], body, prompt_tokens)
        return

    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(payload.split("\n"))
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1], events[-3:]
    chunks = events[:-1]
    assert all(isinstance(e, dict) and "error" not in e for e in chunks), chunks
    kind = "chat.completion.chunk" if chat else "text_completion"
    assert {e["object"] for e in chunks} == {kind}
    assert len({e["id"] for e in chunks}) == 1
    options = body.get("stream_options") or {}
    with_usage = bool(options.get("include_usage"))
    continuous = with_usage and bool(options.get("continuous_usage_stats"))
    if with_usage:
        final = chunks[-1]
        assert final["choices"] == []
        _check_usage(final["usage"], body, prompt_tokens)
        choice_chunks = chunks[:-1]
    else:
        assert all(e.get("usage") is None for e in chunks)
        choice_chunks = chunks
    finishes = [e["choices"][0]["finish_reason"] for e in choice_chunks]
    assert finishes[-1] in ("length", "stop") and all(f is None for f in finishes[:-1])
    assert any(_text_of(e["choices"][0], chat) for e in choice_chunks)
    if continuous:
        # vLLM's continuous usage stats: cumulative usage on every chunk, never decreasing.
        counts = [e["usage"]["completion_tokens"] for e in chunks]
        assert counts == sorted(counts) and counts[-1] == final["usage"]["completion_tokens"]
        assert all(e["usage"]["prompt_tokens"] == prompt_tokens for e in chunks)
    elif with_usage:
        assert all(e["usage"] is None for e in choice_chunks)


@pytest.mark.parametrize("fixture_path", OTHERS, ids=lambda p: p.stem)
def test_captured_client_discovery_request_gets_200(client, fixture_path):
    fixture = _load(fixture_path)
    response = _send(client, fixture)
    try:
        payload = b"".join(response.iter_bytes())
    finally:
        response.close()
    assert response.status_code == 200, payload[:400]
    if fixture["method"] == "HEAD":
        assert payload == b""
    elif response.headers["content-type"].startswith("application/json"):
        assert isinstance(json.loads(payload), dict)
    else:  # /metrics: Prometheus text
        assert fixture["path"] == "/metrics" and b"# TYPE" in payload
