"""The streaming client against the fake server, in-process with plain threads (no gevent)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator

import pytest
from lg_support import FakeServer, itl_gaps, start_fake_server, stop_fake_server

from loadgen.client import ClientConfig, OpenAIClient
from loadgen.httpconn import parse_target
from loadgen.plan import PlannedRequest
from loadgen.records import RequestRecord, validate_record


def _request(max_tokens: int = 6) -> PlannedRequest:
    return PlannedRequest(
        index=0,
        offset_seconds=0.0,
        stage="main",
        priority="interactive",
        length_class="short",
        messages=(("user", "hello world"),),
        prompt_tokens=11,
        max_tokens=max_tokens,
    )


def _send(client: OpenAIClient, n: int = 0, max_tokens: int = 6) -> dict:
    import time

    rec = RequestRecord(
        id=f"0-{n}",
        profile="test",
        stage="main",
        priority="interactive",
        length_class="short",
        endpoint=client.config.endpoint,
        stream=client.config.stream,
        max_tokens=max_tokens,
        planned_at=time.monotonic(),
    )
    out = client.send(_request(max_tokens), rec).to_dict()
    assert validate_record(out) == []
    return out


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory) -> Iterator[FakeServer]:
    """One server for all fault kinds (switched through /control): server start-up is slow."""
    server = start_fake_server(
        tmp_path_factory.mktemp("faults"), ["--ttft-ms", "1", "--itl-ms", "1", "--hang-s", "2"]
    )
    yield server
    stop_fake_server(server)


@pytest.fixture
def client_for(fake_server: Callable[..., FakeServer]):
    clients: list[OpenAIClient] = []

    def make(server: FakeServer, **cfg: object) -> OpenAIClient:
        client = OpenAIClient(parse_target(server.url), ClientConfig(model="fake-model", **cfg))
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


def test_ttft_and_itl_medians_match_injected_delays(fake_server, client_for) -> None:
    server = fake_server("--ttft-ms", "30", "--itl-ms", "8")
    client = client_for(server)
    recs = [_send(client, n, max_tokens=8) for n in range(8)]
    assert all(r["status"] == "ok" for r in recs)
    ttft = statistics.median(r["first_token_at"] - r["sent_at"] for r in recs)
    itl = statistics.median(itl_gaps(recs))
    # Against the server's own clock (request read -> first content written), which already
    # holds its late wake-ups on a loaded machine: what is left is the client's share, and a
    # client that stamped late or early would show here. Never below what was injected.
    server_ttft = statistics.median(server.stats()["ttft_seconds"])
    assert 0.030 - 0.0005 <= server_ttft <= ttft < server_ttft + 0.002, (ttft, server_ttft)
    # ITL one-sided: a late wake-up only lengthens a gap; a chunk/token mix-up halves or doubles it
    assert 0.008 - 0.0005 <= itl < 0.008 + 0.003, itl
    # the role-only first chunk is not a token; usage came from the server
    assert all(r["output_tokens"] == 8 and r["tokens_source"] == "usage" for r in recs)
    assert all(len(r["chunk_times"]) == 8 for r in recs)


def test_tokens_are_counted_without_usage_and_taken_from_per_chunk_usage(
    fake_server, client_for
) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--no-usage", "--chunk-tokens", "3")
    rec = _send(client_for(server), max_tokens=7)
    assert (rec["tokens_source"], rec["output_tokens"], rec["chunk_tokens"]) == (
        "counted",
        3,
        [1, 1, 1],
    )
    assert rec["chunk_tokens_source"] == "assumed"
    server.control(usage=True, per_chunk_usage=True)
    rec = _send(client_for(server, continuous_usage=True), max_tokens=7)
    assert (rec["tokens_source"], rec["output_tokens"], rec["chunk_tokens"]) == (
        "usage",
        7,
        [3, 3, 1],
    )
    assert rec["chunk_tokens_source"] == "usage"


def test_itl_of_multi_token_chunks_is_per_token(fake_server, client_for) -> None:
    # 3 tokens a chunk, 10 ms a token: chunks 30 ms apart, each giving 3 gaps of ~10 ms.
    server = fake_server("--ttft-ms", "1", "--itl-ms", "10", "--chunk-tokens", "3")
    server.control(per_chunk_usage=True)
    rec = _send(client_for(server, continuous_usage=True), max_tokens=9)
    assert rec["chunk_tokens"] == [3, 3, 3] and rec["chunk_tokens_source"] == "usage"
    gaps = itl_gaps([rec])
    assert len(gaps) == 6  # the first chunk's tokens are TTFT's, not gaps
    assert abs(statistics.median(gaps) - 0.010) < 0.003


def test_completions_and_non_streaming_requests(fake_server, client_for) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    rec = _send(client_for(server, endpoint="completions"), max_tokens=5)
    assert rec["status"] == "ok" and rec["output_tokens"] == 5 and len(rec["chunk_times"]) == 5
    rec = _send(client_for(server, stream=False), max_tokens=5)
    assert rec["status"] == "ok" and rec["output_tokens"] == 5
    assert rec["first_token_at"] == rec["done_at"]
    assert (rec["chunk_tokens"], rec["chunk_tokens_source"]) == ([5], "usage")
    server.control(usage=False)  # the whole answer's bytes stand in for its tokens
    rec = _send(client_for(server, stream=False), max_tokens=5)
    assert (rec["chunk_tokens"], rec["chunk_tokens_source"]) == ([5], "assumed")
    assert server.stats()["by_path"] == {"/v1/completions": 1, "/v1/chat/completions": 2}


@pytest.mark.parametrize(
    ("fault", "status", "http_status", "reason"),
    [
        ("http_500", "http_error", 500, "HTTP 500: injected 500"),
        ("http_429", "http_error", 429, "HTTP 429: injected 429"),
        ("non_json_error", "http_error", 502, "non-JSON error body"),
        ("malformed_sse", "protocol_error", 200, "malformed SSE data: not JSON"),
        ("cut_before_finish", "protocol_error", 200, "stream ended without [DONE]"),
        ("drop_mid_stream", "connection_error", 200, "connection closed mid-body"),
        ("close_before_headers", "connection_error", None, "before the response headers"),
        ("bad_http", "protocol_error", None, "bad status line"),
        ("hang", "timeout", None, "no complete response within 0.3 s"),
    ],
)
def test_every_error_kind_is_recorded_with_its_reason(
    fault_server, client_for, fault, status, http_status, reason
) -> None:
    server = fault_server
    server.control(fault=fault)
    client = client_for(server, request_timeout_seconds=0.3)
    rec = _send(client, max_tokens=4)
    assert rec["status"] == status
    assert rec["http_status"] == http_status
    assert reason in rec["error"]
    assert rec["done_at"] is not None
    # the client recovers: the next request on the same client succeeds
    server.control(fault="none")
    assert _send(client, 1, max_tokens=4)["status"] == "ok"


def test_a_finished_stream_without_done_is_complete(fake_server, client_for) -> None:
    # transformers serve ends a whole answer (finish_reason, usage) with no `data: [DONE]`.
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    server.control(fault="no_done")
    rec = _send(client_for(server), max_tokens=4)
    assert (rec["status"], rec["error"], rec["finish_reason"]) == ("ok", None, "length")
    assert rec["output_tokens"] == 4 and rec["done_at"] >= rec["chunk_times"][-1] - 1e-6


def test_cached_tokens_come_from_usage_prompt_tokens_details(fake_server, client_for) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    rec = _send(client_for(server), max_tokens=4)
    assert rec["status"] == "ok" and rec["cached_tokens"] == min(rec["prompt_tokens"], 3)
    server.control(usage=False)  # no usage at all: the record does not say, it is not 0
    assert _send(client_for(server), 1, max_tokens=4)["cached_tokens"] is None


def test_keepalive_connection_is_reused(fake_server, client_for) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    client = client_for(server)
    for n in range(3):
        assert _send(client, n)["status"] == "ok"
    assert len(client.pool._idle) == 1


def test_requests_name_the_load_generator_in_user_agent(fake_server, client_for) -> None:
    # How a server's access log or a packet capture (benchmarks/wire_capture.py) tells
    # batchgate's load from other clients'.
    from importlib.metadata import version

    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    assert _send(client_for(server))["status"] == "ok"
    assert server.stats()["user_agents"] == {f"batchgate-loadgen/{version('batchgate')}": 1}


def test_connection_closed_by_server_keepalive_timeout_is_replaced(fake_server, client_for) -> None:
    import time

    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--keepalive-timeout-s", "0.2")
    client = client_for(server)
    assert _send(client, 0)["status"] == "ok"
    before = server.stats()["connections_total"]  # urllib's own connections count too
    deadline = time.monotonic() + 5
    while client.pool._idle and client.pool._idle[0].looks_alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # until the server has closed the idle connection
    assert _send(client, 1)["status"] == "ok"
    stats = server.stats()
    # one new connection for the request, one for this stats call; no request was lost
    assert stats["connections_total"] - before == 2
    assert stats["requests_total"] == 2
