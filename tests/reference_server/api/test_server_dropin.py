"""The server as a drop-in for vLLM's clients (guidellm, AIPerf): the fields vLLM accepts do what
they say, unknown fields are ignored and logged once (refused under --strict), and the extra
endpoints (/openapi.json, /version, /tokenize, /detokenize) answer in vLLM's shapes.

Two real servers on port 0 (default and --strict), polled on /health, private to this module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from server_testlib import metric, parse_sse, wait_until

from reference_server.tokenizer import ByteTokenizer

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_SECONDS = 120.0
TOKENIZER = ByteTokenizer()
MESSAGES = [{"role": "user", "content": "Tell me a story."}]
ARGS = ["--device", "cpu", "--max-model-len", "512", "--max-tokens-cap", "256",
        "--default-max-tokens", "16", "--log-level", "warning"]  # fmt: skip


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port_file: Path
    log_path: Path
    base_url: str = ""

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    pytest.fail(f"server exited ({self.process.returncode}):\n{self.log()[-4000:]}")
                text = self.port_file.read_text().strip() if self.port_file.exists() else ""
                if text:
                    self.base_url = f"http://127.0.0.1:{int(text)}"
                    try:
                        if http.get(f"{self.base_url}/health").status_code == 200:
                            return self
                    except httpx.TransportError:
                        pass
                time.sleep(0.05)
        pytest.fail(f"server not ready in {START_TIMEOUT_SECONDS} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _launch(workdir: Path, extra: list[str]) -> Server:
    workdir.mkdir(parents=True, exist_ok=True)
    port_file, log_path = workdir / "port", workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", "0", "--port-file",
             str(port_file), *ARGS, *extra],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    return Server(process=process, port_file=port_file, log_path=log_path)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    base = tmp_path_factory.mktemp("dropin")
    launched = {
        "default": _launch(base / "default", []),
        "strict": _launch(base / "strict", ["--strict"]),
    }
    try:
        yield launched
    finally:
        for server in launched.values():
            server.stop()


@pytest.fixture(scope="module")
def server(servers: dict[str, Server]) -> Server:
    return servers["default"].wait_ready()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        yield http


@pytest.fixture
def strict_client(servers: dict[str, Server]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=servers["strict"].wait_ready().base_url, timeout=60.0) as http:
        yield http


def stream(client: httpx.Client, path: str, body: dict) -> list:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = list(response.iter_lines())
    events = parse_sse(lines)
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    assert all(isinstance(e, dict) and "error" not in e for e in events[:-1]), events
    return events[:-1]


def chunk_text(event: dict) -> str:
    choice = event["choices"][0]
    return choice["delta"].get("content") or "" if "delta" in choice else choice["text"]


def endpoint_body(endpoint: str, **fields: object) -> tuple[str, dict]:
    if endpoint == "chat":
        return "/v1/chat/completions", {"messages": MESSAGES, **fields}
    return "/v1/completions", {"prompt": "Once upon a time", **fields}


# -- continuous usage stats --------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_continuous_usage_puts_cumulative_usage_on_every_chunk(client, endpoint):
    path, body = endpoint_body(
        endpoint, max_tokens=12, stream=True, temperature=0,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )  # fmt: skip
    events = stream(client, path, body)
    final = events[-1]
    assert final["choices"] == []
    assert final["usage"]["completion_tokens"] == 12
    prompt_tokens = final["usage"]["prompt_tokens"]
    previous = 0
    for event in events[:-1]:
        usage = event["usage"]
        assert usage["prompt_tokens"] == prompt_tokens
        assert usage["total_tokens"] == prompt_tokens + usage["completion_tokens"]
        delta = usage["completion_tokens"] - previous
        text = chunk_text(event)
        if event["choices"][0]["finish_reason"] is not None:
            assert delta == 0 and usage == final["usage"]  # the finish chunk: the final count
        elif text:
            # A chunk counts the tokens it carries: one byte token per UTF-8 byte of its text
            # (generated text is valid UTF-8, so no U+FFFD stands for invalid bytes).
            assert "\ufffd" not in text
            assert delta == len(text.encode("utf-8")), (text, usage)
        else:
            assert usage["completion_tokens"] == 0  # chat's role chunk comes before any token
        previous = usage["completion_tokens"]
    assert previous == final["usage"]["completion_tokens"]


def test_continuous_usage_needs_include_usage_as_in_vllm(client):
    path, body = endpoint_body(
        "chat", max_tokens=4, stream=True, stream_options={"continuous_usage_stats": True}
    )
    events = stream(client, path, body)
    assert all("usage" not in e for e in events)
    assert all(e["choices"] for e in events)  # and no usage chunk


def test_usage_without_continuous_stats_is_null_until_the_usage_chunk(client):
    path, body = endpoint_body(
        "completions", max_tokens=4, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": False},
    )  # fmt: skip
    events = stream(client, path, body)
    assert all(e["usage"] is None for e in events[:-1])
    assert events[-1]["usage"]["completion_tokens"] == 4


# -- the bodies guidellm and AIPerf send ---------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_guidellm_openai_backend_bodies_get_200_and_valid_sse(client, endpoint):
    # guidellm's OpenAI HTTP backend: model, messages or prompt, the output limit under both
    # names, stop cleared, ignore_eos, stream with usage and continuous usage stats.
    path, body = endpoint_body(
        endpoint, model="tiny", max_tokens=8, max_completion_tokens=8, stop=None,
        ignore_eos=True, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )  # fmt: skip
    events = stream(client, path, body)
    assert events[-1]["usage"]["completion_tokens"] == 8
    assert [e["usage"]["completion_tokens"] for e in events] == sorted(
        e["usage"]["completion_tokens"] for e in events
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"min_tokens": 10, "ignore_eos": True},  # --extra-inputs min_tokens:10 ignore_eos:true
        {"min_tokens": 10},  # min_tokens alone
        {"priority": 1, "top_k": -1, "repetition_penalty": 1.0},
    ],
)
def test_aiperf_chat_bodies_get_200_and_valid_sse(client, extra):
    # AIPerf's chat endpoint: messages with a name, max_completion_tokens from the output
    # length, stream; --per-chunk-usage asks for continuous usage; --extra-inputs merge in.
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "name": "text", "content": "a b c d e f"}],
        "max_completion_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        **extra,
    }
    events = stream(client, "/v1/chat/completions", body)
    assert events[-1]["usage"]["completion_tokens"] == 10
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"


def test_aiperf_completions_body_gets_200(client):
    # AIPerf's completions endpoint: prompt, max_tokens, stream; extra inputs merged in.
    body = {"model": "tiny", "prompt": "a b c", "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True}, "min_tokens": 6,
            "ignore_eos": True}  # fmt: skip
    events = stream(client, "/v1/completions", body)
    assert events[-1]["usage"]["completion_tokens"] == 6


# -- stop_token_ids and min_tokens ---------------------------------------------------------------


def first_ascii_token(client: httpx.Client) -> tuple[str, dict, int]:
    """A greedy completion's first ASCII output character, the request body that produced it
    and the 1-based position of its token. The engine hands over one output per sampled token,
    so a chunk whose text ends in an ASCII character ends with that byte's token, and its
    continuous usage count is that token's position."""
    for attempt in range(8):
        body = {"prompt": f"stop probe {attempt}", "max_tokens": 24, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True,
                                                   "continuous_usage_stats": True}}  # fmt: skip
        seen = ""
        for event in stream(client, "/v1/completions", body)[:-1]:
            text = chunk_text(event)
            position = event["usage"]["completion_tokens"]
            first = text and ord(text[-1]) < 128 and text[-1] not in seen + text[:-1]
            if first and position <= 16:  # room left for min_tokens beyond it
                return text[-1], body, position
            seen += text
    pytest.skip("no ASCII output character in the greedy probes")


def test_stop_token_ids_stop_at_the_first_listed_token(client):
    char, body, position = first_ascii_token(client)
    body = {**body, "stream": False, "stop_token_ids": [ord(char)]}
    del body["stream_options"]
    answer = client.post("/v1/completions", json=body).json()
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == position


def test_min_tokens_defers_stop_token_ids_and_forces_at_least_n_tokens(client):
    char, body, position = first_ascii_token(client)
    body = {**body, "stream": False, "stop_token_ids": [ord(char)], "min_tokens": position + 3}
    del body["stream_options"]
    answer = client.post("/v1/completions", json=body).json()
    assert answer["usage"]["completion_tokens"] >= position + 3
    # min_tokens = max_tokens without ignore_eos: exactly that many.
    body = {**body, "min_tokens": 20, "max_tokens": 20}
    answer = client.post("/v1/completions", json=body).json()
    assert answer["usage"]["completion_tokens"] == 20
    assert answer["choices"][0]["finish_reason"] == "length"


def test_min_tokens_above_the_default_raises_the_default_max_tokens(client):
    answer = client.post("/v1/completions", json={"prompt": "x", "min_tokens": 20}).json()
    assert answer["usage"]["completion_tokens"] == 20  # the server default is 16


# -- integer priority ----------------------------------------------------------------------------


@pytest.mark.parametrize(("priority", "cls"), [(5, "batch"), (1, "batch"), (0, "interactive"),
                                               (-3, "interactive")])  # fmt: skip
def test_integer_priority_maps_to_a_class(client, priority, cls):
    def counts() -> dict[str, float]:
        text = client.get("/metrics").text
        return {c: metric(text, "batchgate_e2e_seconds_count", priority=c)
                for c in ("interactive", "batch")}  # fmt: skip

    before = counts()
    body = {"prompt": "p", "max_tokens": 2, "priority": priority}
    assert client.post("/v1/completions", json=body).status_code == 200
    after = counts()
    other = "batch" if cls == "interactive" else "interactive"
    assert (after[cls] - before[cls], after[other] - before[other]) == (1, 0)


# -- unknown fields ------------------------------------------------------------------------------


def test_unknown_fields_are_ignored_and_logged_once_per_request(server, client):
    marker = f"probe_{uuid.uuid4().hex[:12]}"
    body = {
        "messages": [{"role": "user", "content": "hi", f"{marker}_msg": 1}],
        "max_tokens": 3,
        f"{marker}_top": {"x": 1},
        "stream_options": {"include_usage": True, f"{marker}_opt": True},
        "stream": True,
    }
    stream(client, "/v1/chat/completions", body)

    def lines() -> list[str]:
        return [line for line in server.log().splitlines() if marker in line]

    assert wait_until(lambda: len(lines()) >= 1, timeout_seconds=5), server.log()[-2000:]
    time.sleep(0.2)
    (line,) = lines()
    for name in (f"{marker}_top", f"stream_options.{marker}_opt", f"messages[0].{marker}_msg"):
        assert name in line
    assert "/v1/chat/completions" in line
    # One line per request; the embeddings and tokenize endpoints follow the same rule.
    assert client.post("/v1/embeddings", json={"input": "a", marker: 1}).status_code == 200
    assert client.post("/tokenize", json={"prompt": "a", marker: 1}).status_code == 200
    assert wait_until(lambda: len(lines()) == 3, timeout_seconds=5), lines()


def test_known_fields_are_still_checked_strictly(client):
    cases = [
        ("/v1/chat/completions", {"messages": MESSAGES, "priority": "vip"}, "priority"),
        ("/v1/chat/completions", {"messages": MESSAGES, "priority": 1.5}, "priority"),
        ("/v1/chat/completions", {"messages": MESSAGES, "priority": True}, "priority"),
        ("/v1/completions", {"prompt": "x", "stop_token_ids": "1"}, "stop_token_ids"),
        ("/v1/completions", {"prompt": "x", "stop_token_ids": [1, 9999]}, "stop_token_ids[1]"),
        ("/v1/completions", {"prompt": "x", "min_tokens": "3"}, "min_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 4, "min_tokens": 5}, "min_tokens"),
        ("/v1/completions", {"prompt": "x", "max_completion_tokens": "5"},
         "max_completion_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 4, "max_completion_tokens": 5},
         "max_completion_tokens"),
        ("/v1/chat/completions", {"messages": MESSAGES, "stream_options": {
            "include_usage": True, "continuous_usage_stats": "yes"}},
         "stream_options.continuous_usage_stats"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}]},
         "messages[0].content"),
        ("/v1/chat/completions", {"messages": MESSAGES, "logprobs": True}, "logprobs"),
    ]  # fmt: skip
    for path, body, param in cases:
        response = client.post(path, json=body)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["param"] == param and error["message"].startswith(param), (body, error)
