"""The drop-in server's strict mode, null assistant content, max_completion_tokens on
completions, and the extra endpoints (/openapi.json, /version, /tokenize, /detokenize).

Servers and helpers are the ones of test_server_dropin.py (started once per module here too).
"""

# ruff: noqa: F401, F811 - the fixtures are imported to be found by name, and shadowed by design

from __future__ import annotations

from test_server_dropin import (
    MESSAGES,
    TOKENIZER,
    client,
    server,
    servers,
    stream,
    strict_client,
)

from reference_server.api.protocol import CHAT_FIELDS, COMPLETION_FIELDS


def test_strict_server_refuses_unknown_fields_in_openai_error_shape(strict_client):
    cases = [
        ("/v1/chat/completions", {"messages": MESSAGES, "surprise": 1}, "surprise"),
        ("/v1/completions", {"prompt": "x", "stream_options": {"bogus": True}},
         "stream_options.bogus"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x", "extra": 1}]},
         "messages[0].extra"),
        ("/v1/embeddings", {"input": "a", "nope": 1}, "nope"),
        ("/tokenize", {"prompt": "a", "nope": 1}, "nope"),
    ]  # fmt: skip
    for path, body, param in cases:
        response = strict_client.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["param"], error["code"], error["type"]) == (
            param, "unknown_parameter", "invalid_request_error",
        )  # fmt: skip


def test_strict_server_accepts_every_vllm_field_it_knows(strict_client):
    body = {"messages": [{"role": "assistant", "content": None}, *MESSAGES], "priority": 3,
            "max_completion_tokens": 5, "min_tokens": 2, "stop_token_ids": [10],
            "stream": True, "stream_options": {"include_usage": True,
                                               "continuous_usage_stats": True}}  # fmt: skip
    events = stream(strict_client, "/v1/chat/completions", body)
    assert events[-1]["usage"]["completion_tokens"] >= 2


# -- smaller compatibility points ------------------------------------------------------------------


def test_assistant_content_null_is_accepted(client):
    messages = [*MESSAGES, {"role": "assistant", "content": None}, {"role": "user", "content": "?"}]
    response = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert response.status_code == 200, response.text
    expected = TOKENIZER.apply_chat_template(
        [*MESSAGES, {"role": "assistant", "content": ""}, {"role": "user", "content": "?"}]
    )
    assert response.json()["usage"]["prompt_tokens"] == len(expected)


def test_max_completion_tokens_on_completions(client):
    answer = client.post("/v1/completions", json={"prompt": "x", "max_completion_tokens": 5})
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 5


# -- endpoints -----------------------------------------------------------------------------------


def test_openapi_json_lists_the_openai_endpoints_and_every_accepted_field(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/tokenize",
                 "/detokenize"):  # fmt: skip
        assert "post" in paths[path], path
    for path in ("/v1/models", "/version", "/health", "/metrics"):
        assert "get" in paths[path], path
    schemas = document["components"]["schemas"]
    assert set(CHAT_FIELDS) <= set(schemas["ChatCompletionRequest"]["properties"])
    assert set(COMPLETION_FIELDS) <= set(schemas["CompletionRequest"]["properties"])
    assert schemas["ChatCompletionRequest"]["additionalProperties"] is True


def test_version(client):
    from importlib.metadata import PackageNotFoundError, version

    try:
        expected = version("batchgate")
    except PackageNotFoundError:
        expected = "0.1.0"
    assert client.get("/version").json() == {"version": expected}


def test_tokenize_prompt_and_messages_and_detokenize(client):
    answer = client.post("/tokenize", json={"model": "tiny", "prompt": "abc"}).json()
    assert answer == {"tokens": [TOKENIZER.bos_token_id, 97, 98, 99], "count": 4,
                      "max_model_len": 512}  # fmt: skip
    plain = client.post("/tokenize", json={"prompt": "abc", "add_special_tokens": False}).json()
    assert plain["tokens"] == [97, 98, 99]
    chat = client.post("/tokenize", json={"messages": MESSAGES}).json()
    served = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1})
    assert chat["tokens"] == TOKENIZER.apply_chat_template(MESSAGES)
    assert chat["count"] == served.json()["usage"]["prompt_tokens"]
    no_prompt = client.post(
        "/tokenize", json={"messages": MESSAGES, "add_generation_prompt": False}
    ).json()
    assert no_prompt["tokens"] == chat["tokens"][:-1]
    back = client.post("/detokenize", json={"model": "tiny", "tokens": answer["tokens"]})
    assert back.json() == {"prompt": "abc"}
    for path, body, param in [
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {"messages": "hi"}, "messages"),
        ("/tokenize", {"prompt": "a", "model": "gpt-9"}, "model"),
        ("/detokenize", {}, "tokens"),
        ("/detokenize", {"tokens": [1, -1]}, "tokens[1]"),
    ]:
        response = client.post(path, json=body)
        assert response.status_code in (400, 404), response.text
        assert response.json()["error"]["param"] == param
