"""Prefix caching over HTTP against the shared real server (block size 16): the cached prompt
tokens in `usage.prompt_tokens_details` (chat and completions, streamed and not), the metrics,
and the live toggle through PUT /admin/batching. Each test uses a prefix of its own, and reads
counters as differences, so other tests on the same server do not matter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from server_testlib import metric, parse_sse, wait_until

from reference_server.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
BLOCK_SIZE = 16  # the server's --block-size default


def _prefix() -> str:
    return f"[{uuid.uuid4().hex}] Context every request of this test shares. " * 3


def _cached_blocks_tokens(first: list[int], second: list[int]) -> int:
    """What `second` may find cached after `first`: the full blocks of their common prefix, at
    most up to second's next-to-last token."""
    common = 0
    while common < min(len(first), len(second)) and first[common] == second[common]:
        common += 1
    return min(common, len(second) - 1) // BLOCK_SIZE * BLOCK_SIZE


def _metrics(client: httpx.Client) -> str:
    return client.get("/metrics").text


def _counters(client: httpx.Client) -> tuple[float, float]:
    text = _metrics(client)
    return (
        metric(text, "batchgate_prefix_cache_queries_total"),
        metric(text, "batchgate_prefix_cache_hits_total"),
    )


def _drained(client: httpx.Client) -> bool:
    return metric(_metrics(client), "batchgate_kv_blocks_used") == 0


def _completion(client: httpx.Client, prompt: str, *, stream: bool = False) -> dict:
    body = {"prompt": prompt, "max_tokens": 3, "temperature": 0}
    if not stream:
        response = client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        return response.json()["usage"]
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/completions", json=body) as response:
        events = parse_sse(list(response.iter_lines()))
    assert events[-1] == "[DONE]"
    return events[-2]["usage"]


def _chat(client: httpx.Client, messages: list[dict], *, stream: bool) -> dict:
    body: dict = {"messages": messages, "max_tokens": 3, "temperature": 0}
    if not stream:
        return client.post("/v1/chat/completions", json=body).json()["usage"]
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        events = parse_sse(list(response.iter_lines()))
    return events[-2]["usage"]


@pytest.fixture
def caching_restored(client: httpx.Client) -> Iterator[None]:
    yield
    client.put("/admin/batching", json={"enable_prefix_caching": True})


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_completions_report_cached_prompt_tokens_and_metrics_count_them(client, stream):
    prefix = _prefix()
    first_ids = TOKENIZER.encode(prefix + "first", add_bos=True)
    second_ids = TOKENIZER.encode(prefix + "second", add_bos=True)
    queries, hits = _counters(client)
    first = _completion(client, prefix + "first", stream=stream)
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}  # a prefix never seen
    second = _completion(client, prefix + "second", stream=stream)
    expected = _cached_blocks_tokens(first_ids, second_ids)
    assert expected >= 8 * BLOCK_SIZE
    assert second["prompt_tokens_details"] == {"cached_tokens": expected}
    assert second["prompt_tokens"] == len(second_ids)
    assert wait_until(lambda: _drained(client), timeout_seconds=30)
    after_queries, after_hits = _counters(client)
    assert after_queries - queries == len(first_ids) + len(second_ids)
    assert after_hits - hits == expected
    text = _metrics(client)
    # Nothing is in use once both finished, but their full blocks stay cached (evictable).
    assert metric(text, "batchgate_kv_blocks_used") == 0
    assert metric(text, "batchgate_kv_blocks_cached") >= expected // BLOCK_SIZE
    assert metric(text, "batchgate_kv_usage_ratio") == 0


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_chat_reports_the_cached_system_prompt(client, stream):
    system = {"role": "system", "content": _prefix()}
    first = [system, {"role": "user", "content": "Hello?"}]
    second = [system, {"role": "user", "content": "Goodbye?"}]
    assert _chat(client, first, stream=stream)["prompt_tokens_details"]["cached_tokens"] == 0
    usage = _chat(client, second, stream=stream)
    expected = _cached_blocks_tokens(
        TOKENIZER.apply_chat_template(first), TOKENIZER.apply_chat_template(second)
    )
    assert expected > 0
    assert usage["prompt_tokens_details"] == {"cached_tokens": expected}


def test_prefix_caching_is_a_live_setting(client, caching_restored):
    settings = client.get("/admin/batching").json()
    assert settings["enable_prefix_caching"] is True
    prefix = _prefix()
    _completion(client, prefix + "a")
    assert _completion(client, prefix + "b")["prompt_tokens_details"]["cached_tokens"] > 0

    response = client.put("/admin/batching", json={"enable_prefix_caching": False})
    assert response.status_code == 200
    assert response.json()["previous"]["enable_prefix_caching"] is True
    assert response.json()["current"]["enable_prefix_caching"] is False
    # The cache is dropped at once: no free block keeps a cached prefix.
    assert wait_until(
        lambda: metric(_metrics(client), "batchgate_kv_blocks_cached") == 0, timeout_seconds=30
    )
    queries, hits = _counters(client)
    assert _completion(client, prefix + "c")["prompt_tokens_details"] == {"cached_tokens": 0}
    assert _completion(client, prefix + "d")["prompt_tokens_details"] == {"cached_tokens": 0}
    assert wait_until(lambda: _drained(client), timeout_seconds=30)
    assert _counters(client) == (queries, hits)  # no lookups while off
    assert metric(_metrics(client), "batchgate_kv_blocks_cached") == 0

    refused = client.put("/admin/batching", json={"enable_prefix_caching": "yes"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "enable_prefix_caching"

    response = client.put("/admin/batching", json={"enable_prefix_caching": True})
    assert response.json()["previous"]["enable_prefix_caching"] is False
    # On again: the cache starts empty, then fills.
    assert _completion(client, prefix + "e")["prompt_tokens_details"] == {"cached_tokens": 0}
    assert _completion(client, prefix + "f")["prompt_tokens_details"]["cached_tokens"] > 0


def test_models_report_the_context_length(client):
    models = client.get("/v1/models").json()["data"]
    assert [m["max_model_len"] for m in models] == [512]  # the open server's --max-model-len
