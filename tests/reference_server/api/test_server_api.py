"""The OpenAI API against a real server: bodies, usage, SSE framing, the openai client."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import openai
import pytest
from server_testlib import parse_sse

from reference_server.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
MESSAGES = [{"role": "user", "content": "Say something."}]


def stream_events(client: httpx.Client, path: str, body: dict) -> tuple[httpx.Response, list]:
    with client.stream("POST", path, json=body) as response:
        lines = list(response.iter_lines())
    return response, parse_sse(lines)


def test_health_and_models(client):
    assert client.get("/health").json() == {"status": "ok"}
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tiny"]


def test_non_streaming_chat_reports_exact_usage(client):
    response = client.post(
        "/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 7}
    )
    assert response.status_code == 200
    body = response.json()
    prompt_tokens = len(TOKENIZER.apply_chat_template(MESSAGES))
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    usage = body["usage"]
    # The prefix cache may hold MESSAGES' leading blocks from an earlier test on this server.
    assert usage.pop("prompt_tokens_details")["cached_tokens"] in range(prompt_tokens)
    assert usage == {
        "prompt_tokens": prompt_tokens, "completion_tokens": 7, "total_tokens": prompt_tokens + 7,
    }  # fmt: skip
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length"


def test_non_streaming_completion_defaults_max_tokens_and_counts_the_bos(client):
    body = client.post("/v1/completions", json={"prompt": "abc"}).json()
    assert body["object"] == "text_completion"
    assert body["usage"]["prompt_tokens"] == 4  # bos + 3 bytes
    assert body["usage"]["completion_tokens"] == 16  # the open server's --default-max-tokens
    assert body["choices"][0]["finish_reason"] == "length"


def test_streaming_chat_framing_role_first_done_last_usage_chunk(client):
    response, events = stream_events(
        client,
        "/v1/chat/completions",
        {"messages": MESSAGES, "max_tokens": 9, "stream": True,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    prompt_tokens = len(TOKENIZER.apply_chat_template(MESSAGES))
    usage = usage_chunk["usage"]
    assert usage.pop("prompt_tokens_details")["cached_tokens"] in range(prompt_tokens)
    assert usage == {
        "prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9,
    }  # fmt: skip
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "length" and finish["delta"] == {}
    content = chunks[1:-2]
    assert content and all(c["usage"] is None for c in content)
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    assert all("role" not in c["choices"][0]["delta"] for c in content)


def test_streaming_completion_without_usage_option_sends_no_usage(client):
    _, events = stream_events(
        client, "/v1/completions", {"prompt": "hi", "max_tokens": 5, "stream": True}
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "text_completion" for c in chunks)


def test_streamed_text_equals_the_non_streamed_text_for_a_seeded_request(client):
    body = {"prompt": "determinism", "max_tokens": 12, "temperature": 0.8, "seed": 1234}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    _, events = stream_events(client, "/v1/completions", {**body, "stream": True})
    streamed = "".join(c["choices"][0]["text"] for c in events[:-1])
    assert streamed == whole


def test_a_stop_string_ends_the_output_before_it(client):
    # Generated text is valid UTF-8, so two characters from the middle of the greedy output
    # make a stop string that the text really contains.
    body = {"prompt": "hello", "max_tokens": 40, "temperature": 0}
    text = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert "\ufffd" not in text and len(text) >= 6
    stop = text[3:5]
    stopped = client.post("/v1/completions", json={**body, "stop": [stop]}).json()
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["text"] == text[: text.find(stop)]


def test_priority_class_is_accepted_from_body_and_header(client):
    by_body = client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 2, "priority": "batch"}
    )
    by_header = client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 2}, headers={"X-Priority": "batch"}
    )
    assert by_body.status_code == by_header.status_code == 200


def test_embeddings_are_unit_vectors_in_input_order(client):
    body = client.post("/v1/embeddings", json={"input": ["alpha", "beta", "alpha"]}).json()
    vectors = [d["embedding"] for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-3 for v in vectors)
    assert vectors[0] == pytest.approx(vectors[2], abs=1e-5)
    assert vectors[0] != pytest.approx(vectors[1], abs=1e-5)
    assert body["usage"]["prompt_tokens"] == 6 + 5 + 6


def test_embeddings_base64_encoding_matches_float(client):
    floats = client.post("/v1/embeddings", json={"input": "gamma"}).json()["data"][0]["embedding"]
    encoded = client.post(
        "/v1/embeddings", json={"input": "gamma", "encoding_format": "base64"}
    ).json()["data"][0]["embedding"]
    raw = base64.b64decode(encoded)
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert list(decoded) == pytest.approx(floats, abs=1e-6)


@pytest.fixture
def openai_client(server):
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused") as api:
        yield api


def test_official_openai_client_chat_and_completions(openai_client):
    chat = openai_client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6)
    assert chat.usage.completion_tokens == 6
    assert chat.choices[0].finish_reason == "length"
    completion = openai_client.completions.create(model="tiny", prompt="abc", max_tokens=3)
    assert completion.usage.completion_tokens == 3 and completion.usage.prompt_tokens == 4


def test_official_openai_client_streaming_with_usage(openai_client):
    stream = openai_client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=8, stream=True,
        stream_options={"include_usage": True}, extra_body={"priority": "batch"},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == 8
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "length"


def test_official_openai_client_embeddings(openai_client):
    result = openai_client.embeddings.create(model="tiny", input=["one", "two"])
    assert len(result.data) == 2
    assert len(result.data[0].embedding) > 8


def test_official_openai_client_sees_errors_as_typed_exceptions(openai_client):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10**6)
    assert caught.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="gpt-9", messages=MESSAGES, max_tokens=2)
