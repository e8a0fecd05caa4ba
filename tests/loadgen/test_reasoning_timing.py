"""Reasoning-aware timing: the client times the first reasoning token and the first answer token
apart, counts reasoning tokens, and reads both reasoning fields (vLLM/DeepSeek's
`reasoning_content`, OpenAI-style `reasoning`); TTFT stays the first token of either kind."""

from __future__ import annotations

import statistics
import time

import pytest
from lg_support import FakeServer, start_fake_server, stop_fake_server

from loadgen.client import ClientConfig, OpenAIClient
from loadgen.httpconn import parse_target
from loadgen.plan import PlannedRequest
from loadgen.records import RequestRecord, validate_record

FIRST_REASONING_MS = 40.0
FIRST_CONTENT_MS = 90.0
REASONING = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> FakeServer:
    started = start_fake_server(
        tmp_path_factory.mktemp("reasoning"),
        ["--ttft-ms", str(FIRST_REASONING_MS), "--itl-ms", "5",
         "--reasoning-tokens", str(REASONING), "--content-ms", str(FIRST_CONTENT_MS)],
    )  # fmt: skip
    yield started
    stop_fake_server(started)


@pytest.fixture(scope="module")
def client(server) -> OpenAIClient:
    # One client: its pooled connection is reused, so a send is not a TCP connect.
    made = OpenAIClient(parse_target(server.url), ClientConfig(model="fake-model"))
    yield made
    made.close()


def _send(client: OpenAIClient, n: int, *, max_tokens: int = 10) -> dict:
    req = PlannedRequest(
        index=n, offset_seconds=0.0, stage="main", priority="interactive",
        length_class="thinking", messages=(("user", "think"),), prompt_tokens=5,
        max_tokens=max_tokens,
    )  # fmt: skip
    rec = RequestRecord(
        id=f"0-{n}", profile="t", stage="main", priority="interactive", length_class="thinking",
        endpoint="chat", stream=True, max_tokens=max_tokens, planned_at=time.monotonic(),
    )  # fmt: skip
    out = client.send(req, rec).to_dict()
    assert validate_record(out) == [], out
    return out


def test_first_reasoning_and_first_content_medians_match_injected_delays(server, client) -> None:
    server.control(reasoning_field="reasoning_content")
    _send(client, 99)  # the connection is made here
    before = len(server.stats()["first_content_seconds"])
    recs = [_send(client, n) for n in range(12)]
    assert all(r["status"] == "ok" for r in recs)
    reasoning = statistics.median(r["first_reasoning_at"] - r["sent_at"] for r in recs)
    content = statistics.median(r["first_content_at"] - r["sent_at"] for r in recs)
    stats = server.stats()
    # The server's own clock (request read -> chunk written) holds its late wake-ups on a loaded
    # machine: against it the client's stamps are within 2 ms (as TTFT's test), never early.
    server_reasoning = statistics.median(stats["first_reasoning_seconds"][-12:])
    server_content = statistics.median(stats["first_content_seconds"][before:])
    assert FIRST_REASONING_MS / 1e3 - 5e-4 <= server_reasoning <= reasoning, reasoning
    assert reasoning < server_reasoning + 0.002, (reasoning, server_reasoning)
    assert FIRST_CONTENT_MS / 1e3 - 5e-4 <= server_content <= content, content
    assert content < server_content + 0.002, (content, server_content)
    # TTFT is the first token of either kind: here the first reasoning token.
    assert all(r["first_token_at"] == r["first_reasoning_at"] for r in recs)
    assert all(r["reasoning_tokens"] == REASONING for r in recs)  # from usage
    # reasoning and answer chunks both count as generated tokens (ITL, TPOT)
    assert all(len(r["chunk_times"]) == 10 and r["output_tokens"] == 10 for r in recs)


def test_openai_style_reasoning_field_is_read_and_counted_without_usage(server, client) -> None:
    server.control(reasoning_field="reasoning", usage=False)
    try:
        rec = _send(client, 100)
    finally:
        server.control(reasoning_field="reasoning_content", usage=True)
    assert rec["first_reasoning_at"] is not None
    assert rec["first_content_at"] - rec["first_reasoning_at"] > 0.03
    assert rec["reasoning_tokens"] == REASONING  # counted from the reasoning chunks


def test_a_request_without_reasoning_has_ttfc_equal_to_ttft(server, client) -> None:
    server.control(reasoning_tokens=0)
    try:
        rec = _send(client, 200)
    finally:
        server.control(reasoning_tokens=REASONING)
    assert rec["first_reasoning_at"] is None and rec["reasoning_tokens"] == 0
    assert rec["first_content_at"] == rec["first_token_at"]


def test_record_validation_refuses_a_first_token_that_is_neither_kind() -> None:
    rec = {
        **RequestRecord(
            id="0-0", profile="t", stage="main", priority="interactive", length_class="short",
            endpoint="chat", stream=True, max_tokens=4, planned_at=1.0, sent_at=1.0,
            first_token_at=1.2, done_at=1.5, chunk_times=[1.2], chunk_tokens=[1],
            first_reasoning_at=1.1, first_content_at=1.2, reasoning_tokens=1,
        ).to_dict()
    }  # fmt: skip
    assert "first_token_at is not the first reasoning or content token" in validate_record(rec)
    rec.update(first_token_at=1.1, chunk_times=[1.1])
    assert validate_record(rec) == []
    assert "probe_answer on a record that is not a probe" in validate_record(
        {**rec, "probe_answer": "x"}
    )
