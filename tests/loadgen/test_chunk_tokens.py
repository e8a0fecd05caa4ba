"""Per-chunk token counts: what the client asks for (`stream_options.continuous_usage_stats`),
how it reads each chunk's count from cumulative usage, and where a record says its counts came
from (`chunk_tokens_source`). A scripted stream server (stdlib, loopback, port 0) plays exact
SSE events; the timed fake server of test_openai_client.py covers the timing side."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fake_target import closed_port_url, running_target

from loadgen.cli import main
from loadgen.client import ClientConfig, OpenAIClient
from loadgen.errors import ConfigError
from loadgen.httpconn import parse_target
from loadgen.plan import PlannedRequest
from loadgen.probe import probe_continuous_usage
from loadgen.profiles import resolve
from loadgen.records import RequestRecord, validate_record


class _Script:
    """Answers every completion request with the SSE events in `events`; keeps the bodies."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []
        script = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                script.bodies.append(json.loads(self.rfile.read(length)))
                lines = [f"data: {json.dumps(e)}\n\n" for e in script.events]
                payload = ("".join(lines) + "data: [DONE]\n\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def script() -> Iterator[_Script]:
    s = _Script()
    thread = threading.Thread(target=s.server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()
    thread.join()


def _content(text: str, completion_tokens: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": text}}]}
    if completion_tokens is not None:
        event["usage"] = {"prompt_tokens": 5, "completion_tokens": completion_tokens}
    return event


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
FINAL_USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}


def _send(url: str, **config: Any) -> dict[str, Any]:
    client = OpenAIClient(parse_target(url), ClientConfig(model="m", **config))
    request = PlannedRequest(
        index=0,
        offset_seconds=0.0,
        stage="main",
        priority="interactive",
        length_class="short",
        messages=(("user", "hi"),),
        prompt_tokens=2,
        max_tokens=4,
    )
    record = RequestRecord(
        id="0-0",
        profile="t",
        stage="main",
        priority="interactive",
        length_class="short",
        endpoint="chat",
        stream=client.config.stream,
        max_tokens=4,
        planned_at=time.monotonic(),
    )
    try:
        out = client.send(request, record).to_dict()
    finally:
        client.close()
    assert out["status"] == "ok", out["error"]
    assert validate_record(out) == []
    return out


def test_the_body_asks_for_continuous_usage_only_when_it_is_on(script: _Script) -> None:
    script.events = [_content("a")]
    _send(script.url, continuous_usage=True)
    _send(script.url)
    assert [b["stream_options"] for b in script.bodies] == [
        {"include_usage": True, "continuous_usage_stats": True},
        {"include_usage": True},
    ]


def test_cumulative_usage_gives_each_chunk_its_tokens_held_back_ones_included(
    script: _Script,
) -> None:
    # The second token has no text yet (part of a UTF-8 character): the next chunk carries it.
    script.events = [
        {**ROLE, "usage": {"prompt_tokens": 5, "completion_tokens": 0}},
        _content("a", 1),
        _content("", 2),
        _content("é", 3),
        _content("bc", 4),
        FINAL_USAGE,
    ]
    rec = _send(script.url, continuous_usage=True)
    assert rec["chunk_tokens"] == [1, 2, 1]
    assert rec["chunk_tokens_source"] == "usage"
    assert sum(rec["chunk_tokens"]) == rec["output_tokens"] == 4


def test_a_chunk_whose_count_did_not_grow_is_one_token_repaid_by_the_next(
    script: _Script,
) -> None:
    script.events = [_content("a", 1), _content("b", 1), _content("cd", 4), FINAL_USAGE]
    rec = _send(script.url, continuous_usage=True)
    assert rec["chunk_tokens"] == [1, 1, 2]  # adds up to the target's count
    assert sum(rec["chunk_tokens"]) == rec["output_tokens"] == 4


def test_without_usage_on_chunks_each_counts_one_token_and_says_assumed(script: _Script) -> None:
    script.events = [ROLE, _content("ab"), _content("cd"), FINAL_USAGE]
    rec = _send(script.url)
    assert rec["chunk_tokens"] == [1, 1] and rec["chunk_tokens_source"] == "assumed"
    assert (rec["output_tokens"], rec["tokens_source"]) == (4, "usage")  # the final usage chunk


def test_usage_on_some_content_chunks_only_says_mixed(script: _Script) -> None:
    script.events = [_content("a"), _content("b"), _content("cd", 4)]
    rec = _send(script.url)
    assert rec["chunk_tokens"] == [1, 1, 2] and rec["chunk_tokens_source"] == "mixed"


def test_a_record_without_content_says_assumed(script: _Script) -> None:
    script.events = [ROLE, FINAL_USAGE]
    rec = _send(script.url, continuous_usage=True)
    assert rec["chunk_tokens"] == [] and rec["chunk_tokens_source"] == "assumed"


@pytest.mark.parametrize(
    ("exposition", "known"),
    [
        ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n", True),
        ("sglang:num_running_reqs 0\n", True),
        ("batchgate_num_requests_running 0\n", True),
        ("# HELP vllm:x only a comment\ntgi_queue_size 0\n", False),
    ],
)
def test_auto_asks_only_servers_whose_metrics_name_them(exposition: str, known: bool) -> None:
    with running_target() as target:
        target.route("GET", "/metrics", lambda _: (200, exposition))
        assert probe_continuous_usage(target.url, api_key=None, timeout_seconds=5) is known
        # a base URL ending in /v1 still finds /metrics at the root
        assert probe_continuous_usage(target.url + "/v1", api_key=None, timeout_seconds=5) is known
        # no generation request: the target sees exactly the planned requests
        assert {r.path for r in target.requests} == {"/metrics"}


def test_auto_does_not_ask_a_server_without_metrics_or_an_unreachable_one() -> None:
    with running_target() as target:  # every path answers 404, like a plain OpenAI server
        assert probe_continuous_usage(target.url, api_key=None, timeout_seconds=5) is False
    assert probe_continuous_usage(closed_port_url(), api_key=None, timeout_seconds=2) is False


def test_continuous_usage_is_validated_at_the_edge(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve("steady", {}).params["continuous_usage"] == "auto"
    # YAML 1.1 (gates.yaml `profiles:`) reads a bare on/off as a boolean
    assert resolve("steady", {"continuous_usage": True}).params["continuous_usage"] == "on"
    assert resolve("steady", {"continuous_usage": False}).params["continuous_usage"] == "off"
    with pytest.raises(ConfigError, match="continuous_usage must be one of auto, on, off"):
        resolve("steady", {"continuous_usage": "sometimes"})
    assert main(["--profile", "steady", "--continuous-usage", "on", "--show-profile"]) == 0
    assert json.loads(capsys.readouterr().out)["continuous_usage"] == "on"
    assert main(["--profile", "steady", "--set", "continuous_usage=maybe", "--show-profile"]) == 2
    assert "continuous_usage must be one of auto, on, off" in capsys.readouterr().err
