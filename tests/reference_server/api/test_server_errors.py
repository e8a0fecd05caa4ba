"""Every error status a client can cause, in OpenAI's error shape, against real servers."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from server_testlib import ADMIN_TOKEN, API_KEY

MESSAGES = [{"role": "user", "content": "hi"}]


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
        assert param in error["message"]
    return error


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": "many"}, "max_tokens"),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 257}, "max_tokens"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 600}]},
         "messages"),
        ("/v1/completions", {"prompt": "x" * 400, "max_tokens": 200}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "n": 3}, "n"),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature"),
        ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("/v1/completions", {"prompt": "x", "priority": "vip"}, "priority"),
        ("/v1/completions", {"prompt": "x", "priority": True}, "priority"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/chat/completions", [1, 2, 3], "body"),
    ],
)  # fmt: skip
def test_client_mistakes_get_400_naming_the_field(client, path, body, param):
    assert_error(client.post(path, json=body), 400, param)


def test_malformed_json_and_empty_body_are_400_not_422(client):
    error = assert_error(
        client.post("/v1/chat/completions", content=b'{"messages": [', headers={
            "content-type": "application/json"}),
        400,
        "body",
    )  # fmt: skip
    assert error["code"] == "invalid_json"
    assert_error(client.post("/v1/completions", content=b""), 400, "body")
    assert_error(client.post("/v1/completions", content=b"\xff\xfe"), 400, "body")


def test_bad_priority_header_is_400(client):
    response = client.post("/v1/completions", json={"prompt": "x"}, headers={"X-Priority": "now"})
    assert_error(response, 400, "X-Priority")


def test_unknown_model_route_and_method(client):
    error = assert_error(
        client.post("/v1/completions", json={"model": "gpt-7", "prompt": "x"}), 404, "model"
    )
    assert error["code"] == "model_not_found"
    assert_error(client.get("/v1/nothing"), 404)
    assert_error(client.get("/v1/chat/completions"), 405)


def test_admin_ignores_forwarding_headers_unless_a_proxy_is_trusted(client):
    # No --trusted-proxies: X-Forwarded-For is the client's own claim, not its address. The 403
    # for a remote client behind a trusted proxy: test_server_reliability.py.
    response = client.get("/admin/batching", headers={"X-Forwarded-For": "203.0.113.9"})
    assert response.status_code == 200
    assert client.get("/admin/batching").status_code == 200  # loopback itself is allowed


def test_api_key_is_required_on_the_api_but_not_on_health_or_metrics(secured_server):
    with httpx.Client(base_url=secured_server.base_url, timeout=30) as http:
        body = {"prompt": "x", "max_tokens": 2}
        assert_error(http.post("/v1/completions", json=body), 401)
        assert_error(http.post("/v1/completions", json=body,
                               headers={"Authorization": "Bearer wrong"}), 401)  # fmt: skip
        assert_error(http.get("/v1/models"), 401)
        ok = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code == 200
        assert http.get("/health").status_code == 200
        assert http.get("/metrics").status_code == 200


def test_admin_token_is_required_even_from_loopback(secured_server):
    with httpx.Client(base_url=secured_server.base_url, timeout=30) as http:
        assert_error(http.get("/admin/batching"), 401)
        assert_error(http.get("/admin/steps", headers={"Authorization": f"Bearer {API_KEY}"}), 401)
        assert (
            http.get("/admin/batching", headers={"X-Admin-Token": ADMIN_TOKEN}).status_code == 200
        )
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert http.get("/admin/steps", headers=auth).status_code == 200


def test_oversized_body_is_413(secured_server):
    with httpx.Client(base_url=secured_server.base_url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        big = {"prompt": "x" * 4000, "max_tokens": 2}
        assert_error(http.post("/v1/completions", json=big, headers=auth), 413)

        # Without a Content-Length the limit is enforced while reading the chunked body.
        def chunks():
            yield b'{"prompt": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        response = http.post("/v1/completions", content=chunks(), headers=auth)
        assert_error(response, 413)


async def _flood(base_url: str, count: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        # Long enough that the one running request still holds its slot when the rest arrive.
        body = {"prompt": "queue", "max_tokens": 160, "priority": "batch"}
        return await asyncio.gather(
            *(http.post("/v1/completions", json=body) for _ in range(count))
        )


def test_a_full_class_queue_answers_429_with_retry_after(server, client):
    change = client.put(
        "/admin/batching",
        json={"max_num_seqs": 1, "max_num_batched_tokens": 64, "batch": {"max_waiting": 1}},
    )
    assert change.status_code == 200, change.text
    try:
        responses = asyncio.run(_flood(server.base_url, 8))
    finally:
        restore = client.put("/admin/batching", json=change.json()["previous"])
        assert restore.status_code == 200
    statuses = sorted(r.status_code for r in responses)
    # Arrivals are processed before the next step, so how many get in depends on timing; with
    # one running slot and one queue slot most of eight concurrent requests must be refused.
    assert set(statuses) == {200, 429}, statuses
    assert statuses.count(429) >= 4, statuses
    for response in responses:
        if response.status_code == 429:
            error = assert_error(response, 429)
            assert error["code"] == "queue_full"
            assert int(response.headers["Retry-After"]) >= 1


def test_an_integer_past_64_bits_is_named_as_such_not_as_a_number(client):
    # The JSON parser reads 10**20 as a float; the message says what the client sent.
    raw = b'{"prompt": "x", "max_tokens": 100000000000000000000}'
    error = assert_error(
        client.post("/v1/completions", content=raw, headers={"content-type": "application/json"}),
        400,
        "max_tokens",
    )
    assert "must be an integer of at most 64 bits, got 1e+20" in error["message"]
    fraction = assert_error(client.post("/v1/completions", json={"prompt": "x", "seed": 1.5}), 400)
    assert "must be an integer, got number" in fraction["message"]


def test_stream_options_without_a_stream_are_refused_as_openai_and_vllm_do(client):
    for path, base in (("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions",
                                                              {"messages": MESSAGES})):  # fmt: skip
        body = {**base, "max_tokens": 2, "stream_options": {"include_usage": True}}
        error = assert_error(client.post(path, json=body), 400, "stream_options")
        assert "can only be given when stream is true" in error["message"]
        assert_error(client.post(path, json={**body, "stream": False}), 400, "stream_options")
        # Empty or null options ask for nothing: accepted, as vLLM does.
        for empty in ({}, None):
            assert client.post(path, json={**body, "stream_options": empty}).status_code == 200
